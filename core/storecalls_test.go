package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoneAsksItsStore guards DESIGN §2a ("none asks what concrete store
// it has"): only resolveStore tells the stores apart, and no call of
// storeCalls hands a limiter a concrete store to call past the interface.
func TestNoneAsksItsStore(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	concrete := func(n ast.Node) bool {
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && (id.Name == "MemoryStore" || id.Name == "RedisStore") {
				found = true
			}
			return !found
		})
		return found
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "resolveStore" {
				continue
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.TypeAssertExpr:
					if x.Type != nil && concrete(x.Type) {
						t.Errorf("%s: asks whether a store is a %s", fset.Position(x.Pos()), types(x.Type))
					}
				case *ast.TypeSwitchStmt:
					for _, c := range x.Body.List {
						for _, e := range c.(*ast.CaseClause).List {
							if concrete(e) {
								t.Errorf("%s: a type switch tells the stores apart", fset.Position(e.Pos()))
							}
						}
					}
				case *ast.TypeSpec:
					if it, ok := x.Type.(*ast.InterfaceType); ok && x.Name.Name == "storeCalls" {
						for _, m := range it.Methods.List {
							if ft, ok := m.Type.(*ast.FuncType); ok && ft.Results != nil && concrete(ft.Results) {
								t.Errorf("%s: storeCalls.%s returns a concrete store", fset.Position(m.Pos()), m.Names[0].Name)
							}
						}
					}
				}
				return true
			})
		}
	}
}

func types(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "concrete store"
}
