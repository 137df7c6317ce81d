package faults

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy for tests, placed between a client (the relay) and
// a server (PostgreSQL). Cut drops every open connection with a reset and
// closes the listening socket, so that new connections are refused;
// Restore listens again on the same address.
type Proxy struct {
	target string
	addr   string

	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]struct{}
	down     bool
	closed   bool
	accepted int
	wg       sync.WaitGroup
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// Accepted is the number of client connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Active is the number of client connections open now.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

func (p *Proxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down || p.closed {
			p.mu.Unlock()
			reset(c)
			continue
		}
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(client, server) {
		reset(client)
		reset(server)
		return
	}
	var once sync.Once
	done := func() {
		once.Do(func() {
			p.untrack(client, server)
			_ = client.Close()
			_ = server.Close()
		})
	}
	go func() {
		_, _ = io.Copy(server, client)
		done()
	}()
	_, _ = io.Copy(client, server)
	done()
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// reset closes c with an RST instead of an orderly FIN, like a network
// that dropped the connection.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Cut resets every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		return
	}
	p.down = true
	_ = p.ln.Close()
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
}

// Restore listens again on the same address and forwards new connections.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("proxy closed")
	}
	if !p.down {
		return nil
	}
	// The port was ours a moment ago; another process could take it in
	// between, so try for a little while.
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		ln, err = net.Listen("tcp", p.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("proxy: listen again on %s: %w", p.addr, err)
	}
	p.ln, p.down = ln, false
	p.wg.Add(1)
	go p.serve(ln)
	return nil
}

// Close stops the proxy and closes every connection. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}
