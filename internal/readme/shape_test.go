package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreShape guards issue 44's budgets for the store seam: RedisStore
// has at most 12 methods in core (its lease calls are one, as its
// decisions are), and internal/transport at most 17 exported names (core's
// errors are core's, defined once, where users meet them).
func TestStoreShape(t *testing.T) {
	root, _ := readme(t)
	methods := 0
	for _, f := range parseDir(t, filepath.Join(root, "core")) {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && receiver(fd) == "RedisStore" {
				methods++
			}
		}
	}
	if methods == 0 || methods > 12 {
		t.Errorf("core.RedisStore has %d methods, want 1 to 12: gather its calls, do not add", methods)
	}
	var names []string
	for _, f := range parseDir(t, filepath.Join(root, "internal", "transport")) {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	if len(names) == 0 || len(names) > 17 {
		t.Errorf("internal/transport exports %d names, want at most 17: %s", len(names), strings.Join(names, ", "))
	}
}

// parseDir parses the library files of dir (tests aside).
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// receiver names the type of fd's receiver.
func receiver(fd *ast.FuncDecl) string {
	x := fd.Recv.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
