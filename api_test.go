package ratelimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/api.md lists every exported name of the root package and of the
// contract with who needs it; a name added or removed without that page
// changing fails here.
func TestTheSurfaceIsListed(t *testing.T) {
	page, err := os.ReadFile("docs/api.md")
	require.NoError(t, err)
	sections := listed(string(page))
	for dir, section := range map[string]string{".": "`ratelimit`", "backend": "`backend`"} {
		require.Contains(t, sections, section)
		require.Equal(t, exported(t, dir), sections[section], "docs/api.md, section %s, against the code of %q", section, dir)
	}
}

// listed is, for each "## " section of the page, the sorted names in the
// first column of its table.
func listed(page string) map[string][]string {
	out := map[string][]string{}
	section, name := "", regexp.MustCompile("`([A-Za-z.]+)`")
	for _, line := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case strings.HasPrefix(line, "| `") && section != "":
			first := strings.Split(line, "|")[1]
			for _, m := range name.FindAllStringSubmatch(first, -1) {
				out[section] = append(out[section], m[1])
			}
		}
	}
	for s := range out {
		slices.Sort(out[s])
	}
	return out
}

// exported is the sorted exported names of the package in dir: its
// top-level declarations, and Type.Method for the methods of its exported
// types.
func exported(t *testing.T, dir string) []string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						names = append(names, d.Name.Name)
						continue
					}
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
						names = append(names, id.Name+"."+d.Name.Name)
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
	}
	slices.Sort(names)
	return names
}
