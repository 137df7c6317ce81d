// Package house checks the shape of the repository in make test: imports
// that point one way, no function over 100 lines, docs of a size a user
// reads, and no pointers to documents a reader of the repository does not
// have. .golangci.yml enforces the layering in more detail (make lint);
// these checks need no tool beyond go test.
package house
