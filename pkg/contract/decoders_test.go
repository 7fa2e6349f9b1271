package contract

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestEveryDecoderHasAFuzzTarget keeps docs/development.md's claim true: every exported Decode*
// function of this package that takes an event (*event.Event) has a Fuzz target of the same name
// (FuzzDecodeX), which `make fuzz` runs. A new decoder without one fails here.
func TestEveryDecoderHasAFuzzTarget(t *testing.T) {
	var decoders, targets []string
	fset := token.NewFileSet()
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") {
			continue
		}
		file, err := parser.ParseFile(fset, f.Name(), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			name := fn.Name.Name
			switch {
			case strings.HasSuffix(f.Name(), "_test.go") && strings.HasPrefix(name, "Fuzz"):
				targets = append(targets, strings.TrimPrefix(name, "Fuzz"))
			case !strings.HasSuffix(f.Name(), "_test.go") && fn.Name.IsExported() && strings.HasPrefix(name, "Decode") && takesEvent(fn):
				decoders = append(decoders, name)
			}
		}
	}
	if len(decoders) == 0 {
		t.Fatal("found no decoder of events: the rule below checks nothing")
	}
	for _, d := range decoders {
		if !slices.Contains(targets, d) {
			t.Errorf("%s decodes events but has no fuzz target Fuzz%s (fuzz_test.go)", d, d)
		}
	}
}

// takesEvent reports whether fn's first parameter is a *event.Event.
func takesEvent(fn *ast.FuncDecl) bool {
	ps := fn.Type.Params.List
	if len(ps) == 0 {
		return false
	}
	star, ok := ps[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "event" && sel.Sel.Name == "Event"
}
