package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeamsAreTyped guards STYLE.md §16: the packages of the repository
// (every module's, tests and commands aside) reach each other through
// typed APIs. An init() only sets its own package's defaults, and at most
// one exists; no exported package-level func variable (a hook another
// package fills in), and no func type or exported func that passes a
// callback whose signature has an `any` in it.
func TestSeamsAreTyped(t *testing.T) {
	root, _ := readme(t)
	fset := token.NewFileSet()
	inits, files := 0, 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "cmd" || name == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		imported := map[string]bool{}
		for _, im := range f.Imports {
			p := strings.Trim(im.Path.Value, `"`)
			n := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				n = im.Name.Name
			}
			imported[n] = true
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == "init" {
					inits++
					ast.Inspect(d.Body, func(n ast.Node) bool {
						if as, ok := n.(*ast.AssignStmt); ok {
							for _, lhs := range as.Lhs {
								if sel, ok := lhs.(*ast.SelectorExpr); ok {
									if x, ok := sel.X.(*ast.Ident); ok && imported[x.Name] {
										t.Errorf("%s: init() sets %s.%s: another package's hook (STYLE.md §16)", rel, x.Name, sel.Sel.Name)
									}
								}
							}
						}
						return true
					})
				}
				if d.Name.IsExported() && mentionsAny(d.Type) && !routerGet[rel+" "+d.Name.Name] {
					t.Errorf("%s: %s passes an `any`: give the seam its type (STYLE.md §16)", rel, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						if ft, ok := ts.Type.(*ast.FuncType); ok && mentionsAny(&ast.FuncType{Params: &ast.FieldList{List: []*ast.Field{{Type: ft}}}}) {
							t.Errorf("%s: func type %s passes an `any`: give the seam its type (STYLE.md §16)", rel, ts.Name.Name)
						}
					}
					vs, ok := spec.(*ast.ValueSpec)
					if !ok || d.Tok != token.VAR {
						continue
					}
					for _, n := range vs.Names {
						if _, isFunc := vs.Type.(*ast.FuncType); isFunc && n.IsExported() {
							t.Errorf("%s: var %s is a func another package can set: a hook, not a seam (STYLE.md §16)", rel, n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("only %d files read under %s: the walk is broken", files, root)
	}
	if inits > 1 {
		t.Errorf("%d init() functions in library code, want at most 1 (a package's own defaults)", inits)
	}
}

// routerGet is what may take a callback with an `any`: the routers' own
// Context.Get (echo's, gin's) returns one.
var routerGet = map[string]bool{filepath.FromSlash("internal/adapterkey/adapterkey.go") + " ContextKey": true}

// mentionsAny reports whether a function type takes or returns a func
// whose own signature has `any` or `interface{}` in it: a callback that
// the other side must assert back.
func mentionsAny(ft *ast.FuncType) bool {
	found := false
	ast.Inspect(ft, func(n ast.Node) bool {
		inner, ok := n.(*ast.FuncType)
		if !ok || inner == ft {
			return !found
		}
		ast.Inspect(inner, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Ident:
				found = found || x.Name == "any"
			case *ast.InterfaceType:
				found = found || len(x.Methods.List) == 0
			}
			return !found
		})
		return false
	})
	return found
}
