package httpconformance_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// adapterPlumbing are nethttp types that adapters use, not their users.
var adapterPlumbing = map[string]bool{"Gate": true, "KeyFunc": true, "Chain": true, "Router": true, "Fields": true, "ConcurrencyGate": true}

// netHTTPOnly are nethttp options that mean nothing to another router.
var netHTTPOnly = map[string]bool{
	"WithServeMux": true, // net/http's ServeMux
}

// TestAdaptersReExportOptions fails when an adapter misses one of
// nethttp's options (or the types and values they take), re-exports one
// with another signature, or leaves it out of its package documentation:
// one import per router is the promise, and the copies have drifted
// before.
func TestAdaptersReExportOptions(t *testing.T) {
	t.Parallel()
	want := exported(t, "nethttp")
	if len(want.options) < 10 {
		t.Fatalf("found %d nethttp options: %v", len(want.options), want.options)
	}
	for _, adapter := range []string{"chi", "echo", "echo/v5", "gin"} {
		t.Run(adapter, func(t *testing.T) {
			got := exported(t, adapter)
			for name, sig := range want.options {
				if netHTTPOnly[name] {
					continue
				}
				switch s, ok := got.options[name]; {
				case !ok:
					t.Errorf("%s: no %s, nethttp's option %s", adapter, name, sig)
				case s != sig:
					t.Errorf("%s.%s is %s, nethttp's is %s", adapter, name, s, sig)
				}
				if !strings.Contains(got.doc, name) {
					t.Errorf("%s's package documentation does not list %s", adapter, name)
				}
			}
			for name := range want.others {
				if !got.others[name] {
					t.Errorf("%s: no %s, which nethttp's options take", adapter, name)
				}
			}
		})
	}
}

// api is what a package exports for options: functions returning Option,
// by name, with their signatures, and the types, constants and variables
// that go with them.
type api struct {
	options map[string]string
	others  map[string]bool
	doc     string
}

// exported parses the non-test Go files of the module's package dir,
// a slash-separated path from the module root ("echo/v5").
func exported(t *testing.T, dir string) api {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", filepath.FromSlash(dir), "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	a := api{options: map[string]string{}, others: map[string]bool{}}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if file.Doc != nil {
			a.doc += file.Doc.Text()
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil || !d.Name.IsExported() || !returnsOption(d.Type) {
					continue
				}
				var b bytes.Buffer
				sig := *d.Type
				_ = printer.Fprint(&b, fset, &sig)
				a.options[d.Name.Name] = b.String()
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && !adapterPlumbing[s.Name.Name] {
							a.others[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								a.others[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return a
}

func returnsOption(f *ast.FuncType) bool {
	if f.Results == nil || len(f.Results.List) != 1 {
		return false
	}
	id, ok := f.Results.List[0].Type.(*ast.Ident)
	return ok && id.Name == "Option"
}
