package sqlserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerImage is the SQL Server the tests start when a Docker engine
// answers and QUEUEBOX_TEST_SQLSERVER_URL is unset.
const containerImage = "mcr.microsoft.com/mssql/server:2022-latest"

var container struct {
	once sync.Once
	url  string
	err  error
	ctr  *testcontainers.DockerContainer
}

// containerURL starts one SQL Server container for the package (on first
// use) and returns its URL. It fails without starting anything when no
// Docker engine answers.
func containerURL() (string, error) {
	container.once.Do(func() {
		container.url, container.err = startContainer()
	})
	return container.url, container.err
}

func startContainer() (u string, err error) {
	defer func() {
		if r := recover(); r != nil { // testcontainers panics on some broken setups
			err = fmt.Errorf("testcontainers: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	healthCtx, healthCancel := context.WithTimeout(ctx, 5*time.Second)
	err = provider.Health(healthCtx)
	healthCancel()
	_ = provider.Close()
	if err != nil {
		return "", fmt.Errorf("no Docker engine answers: %w", err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	password := "Qb-" + hex.EncodeToString(b) + "-Aa1"
	ctr, err := testcontainers.Run(ctx, containerImage,
		testcontainers.WithEnv(map[string]string{"ACCEPT_EULA": "Y", "MSSQL_SA_PASSWORD": password}),
		testcontainers.WithExposedPorts("1433/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("SQL Server is now ready for client connections").WithStartupTimeout(4*time.Minute)),
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.Background())
		}
		return "", fmt.Errorf("start %s: %w", containerImage, err)
	}
	container.ctr = ctr
	host, err := ctr.Host(ctx)
	if err != nil {
		return "", err
	}
	port, err := ctr.MappedPort(ctx, "1433/tcp")
	if err != nil {
		return "", err
	}
	v := url.Values{"encrypt": {"disable"}}
	return (&url.URL{
		Scheme: "sqlserver", User: url.UserPassword("sa", password),
		Host: fmt.Sprintf("%s:%s", host, port.Port()), RawQuery: v.Encode(),
	}).String(), nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if container.ctr != nil {
		if err := container.ctr.Terminate(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "terminate %s: %v\n", containerImage, err)
		}
	}
	os.Exit(code)
}
