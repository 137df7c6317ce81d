package house

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	module = "github.com/queuebox/queuebox"

	maxFuncLines = 100   // lines between a function's braces, as funlen counts them
	maxDocsLines = 4_500 // all of docs/
	maxPageLines = 600   // one page of docs/
)

// drivers are the clients of databases and brokers, by import path prefix.
// The engine reaches them only through dialect.Dialect and
// destination.Destination; the router, the config and the leaf packages
// never.
var drivers = []string{
	"database/sql",
	"github.com/jackc/pgx",
	"github.com/lib/pq",
	"github.com/microsoft/go-mssqldb",
	"github.com/nats-io/",
	"github.com/segmentio/kafka-go",
	"github.com/twmb/franz-go",
	"github.com/rabbitmq/amqp091-go",
	"net/http",
	"golang.org/x/oauth2",
}

// TestImportsPointOneWay follows the imports of the product code (test
// files aside), through the repository's own packages.
func TestImportsPointOneWay(t *testing.T) {
	g := loadImports(t, repoRoot(t))
	var problems []string
	for _, pkg := range g.packages() {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		switch {
		case under(rel, "dialect"), under(rel, "destination"):
			// Topic patterns and templates come from address/, so the
			// adapters do not link the router's expression engine.
			problems = append(problems, g.reaches(pkg, module+"/router", "github.com/expr-lang/expr")...)
		case under(rel, "producer"):
			// Quoting and the notify lock class come from sqlname/.
			problems = append(problems, g.reaches(pkg, module+"/dialect/")...)
		case under(rel, "relay"):
			// The delivery algorithm, read without meeting a driver type.
			problems = append(problems, g.reaches(pkg, drivers...)...)
		case under(rel, "router"), under(rel, "outbox"), under(rel, "address"), under(rel, "config"):
			problems = append(problems, g.direct(pkg, drivers...)...)
		}
		if !testSupport(rel) {
			for _, imp := range g.imports[pkg] {
				if r, ours := strings.CutPrefix(imp, module+"/"); ours && testSupport(r) {
					problems = append(problems, fmt.Sprintf("%s imports %s, which is test support", pkg, imp))
				}
			}
		}
	}
	report(t, "imports that run against the layering (cmd → relay → {dialect, destination, router} → outbox)", problems)
}

// TestNoFunctionOver100Lines measures every function of the product code
// (test files aside) as funlen does: the lines between its braces,
// comments included.
func TestNoFunctionOver100Lines(t *testing.T) {
	root := repoRoot(t)
	type long struct {
		where string
		lines int
	}
	var found []long
	walk(t, root, func(path, rel string) {
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line - 1; n > maxFuncLines {
				found = append(found, long{fmt.Sprintf("%s:%d %s", rel, start.Line, funcName(fn)), n})
			}
		}
	})
	slices.SortFunc(found, func(a, b long) int { return b.lines - a.lines })
	var problems []string
	for _, l := range found {
		problems = append(problems, fmt.Sprintf("%s: %d lines", l.where, l.lines))
	}
	report(t, fmt.Sprintf("functions over %d lines; split each into named steps", maxFuncLines), problems)
}

// absentDocuments are references to documents a reader of the repository
// does not have: the development log's sessions, lessons and notes, and
// the sections of a contract that is not in the repository. Each pattern
// is written so that this file does not match it.
var absentDocuments = regexp.MustCompile(`(?i)\b(?:[s]ession|[l]esson)\s+\d+|\b[f]ield\s+notes?\b|\b[c]ontract\s*§`)

// TestNoPointersToAbsentDocuments reads the docs, the Go and SQL code and
// the YAML.
func TestNoPointersToAbsentDocuments(t *testing.T) {
	root := repoRoot(t)
	var problems []string
	walk(t, root, func(path, rel string) {
		switch filepath.Ext(rel) {
		case ".md", ".go", ".sql", ".yaml", ".yml", ".tpl":
		default:
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			if m := absentDocuments.Find(line); m != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %q", rel, i+1, m))
			}
		}
	})
	report(t, "pointers to documents outside the repository (the reason goes in the comment, its history in git)", problems)
}

// TestDocsSize: docs/ is for users, at a length they read (its pages, in
// lines).
func TestDocsSize(t *testing.T) {
	root := repoRoot(t)
	total := 0
	var problems []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".md" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := bytes.Count(b, []byte("\n"))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++
		}
		total += n
		if n > maxPageLines {
			rel, _ := filepath.Rel(root, path)
			problems = append(problems, fmt.Sprintf("%s: %d lines, more than %d", filepath.ToSlash(rel), n, maxPageLines))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total > maxDocsLines {
		problems = append(problems, fmt.Sprintf("docs/: %d lines in all, more than %d", total, maxDocsLines))
	}
	report(t, "docs/ too long", problems)
}

// importGraph is the imports of each package of the repository, from its
// non-test files.
type importGraph struct {
	imports map[string][]string // import path -> what its files import
}

func loadImports(t *testing.T, root string) *importGraph {
	t.Helper()
	g := &importGraph{imports: map[string][]string{}}
	walk(t, root, func(path, rel string) {
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		pkg := module
		if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
			pkg += "/" + dir
		}
		for _, s := range f.Imports {
			imp, _ := strconv.Unquote(s.Path.Value)
			if !slices.Contains(g.imports[pkg], imp) {
				g.imports[pkg] = append(g.imports[pkg], imp)
			}
		}
		if _, ok := g.imports[pkg]; !ok {
			g.imports[pkg] = nil
		}
	})
	return g
}

func (g *importGraph) packages() []string {
	var pkgs []string
	for p := range g.imports {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	return pkgs
}

// reaches returns a line for each import under one of the prefixes that
// pkg makes directly or through the repository's packages, with the path.
func (g *importGraph) reaches(pkg string, prefixes ...string) []string {
	var problems []string
	seen := map[string]bool{pkg: true}
	queue := [][]string{{pkg}}
	for len(queue) > 0 {
		chain := queue[0]
		queue = queue[1:]
		for _, imp := range g.imports[chain[len(chain)-1]] {
			if hasPrefix(imp, prefixes) {
				problems = append(problems, fmt.Sprintf("%s imports %s", pkg, strings.Join(append(chain[1:], imp), " → ")))
				continue
			}
			if _, ours := g.imports[imp]; ours && !seen[imp] {
				seen[imp] = true
				queue = append(queue, append(slices.Clone(chain), imp))
			}
		}
	}
	return problems
}

// direct returns a line for each import under one of the prefixes that
// pkg makes itself.
func (g *importGraph) direct(pkg string, prefixes ...string) []string {
	var problems []string
	for _, imp := range g.imports[pkg] {
		if hasPrefix(imp, prefixes) {
			problems = append(problems, fmt.Sprintf("%s imports %s", pkg, imp))
		}
	}
	return problems
}

// hasPrefix reports whether imp is one of prefixes or a package under one;
// a prefix that ends in a slash names only the packages under it.
func hasPrefix(imp string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(imp, p) ||
			imp == p || strings.HasPrefix(imp, p+"/") {
			return true
		}
	}
	return false
}

// under reports whether the repository path rel is dir or inside it.
func under(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

// testSupport: internal/ and the conformance suites, which only tests import.
func testSupport(rel string) bool {
	return under(rel, "internal") || rel == "destination/destinationtest" || rel == "dialect/dialecttest"
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// walk calls fn for every file of the repository, with its path relative
// to root (slash-separated), leaving out version control, build output and
// test fixtures.
func walk(t *testing.T, root string, fn func(path, rel string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
			case strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "vendor",
				rel == "bin", rel == "dist", rel == "tmp":
				return filepath.SkipDir
			}
			return nil
		}
		fn(path, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// repoRoot is the directory of the module's go.mod, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module "+module+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test", module)
		}
		dir = parent
	}
}

// report fails the test with one line per problem under a heading.
func report(t *testing.T, heading string, problems []string) {
	t.Helper()
	if len(problems) > 0 {
		t.Errorf("%s:\n\t%s", heading, strings.Join(problems, "\n\t"))
	}
}
