package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documentation a reader follows from README.md: every Markdown file in the repository
// outside testdata and hidden directories.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repo && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d Markdown files under %s", len(files), repo)
	}
	return files
}

var (
	codeFence  = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	mdHeading  = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
)

// prose is Markdown without its code, where a link is only an example.
func prose(md string) string {
	return inlineCode.ReplaceAllString(codeFence.ReplaceAllString(md, ""), "")
}

// anchors are the fragment ids GitHub gives a Markdown file's headings: lower case, punctuation
// dropped, spaces turned into hyphens, a repeated heading numbered from -1.
func anchors(md string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(codeFence.ReplaceAllString(md, ""), -1) {
		title := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func TestAnchorsAreGitHubs(t *testing.T) {
	got := anchors("# scoreflow\n## 10. Encrypted delivery: strict TLS\n## `make run`: the whole flow\n" +
		"## Writer fleet at 10,000 clusters\n## Proof\n## Proof\n```\n# not a heading\n```\n")
	want := []string{"10-encrypted-delivery-strict-tls", "make-run-the-whole-flow", "proof", "proof-1",
		"scoreflow", "writer-fleet-at-10000-clusters"}
	var ids []string
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Errorf("anchors %v, want %v", ids, want)
	}
}

// Every relative link in the Markdown files resolves: to a file or directory of the repository
// and, with a #fragment into a Markdown file, to one of its headings.
func TestDocLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	checked := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repo, file)
		for _, m := range mdLink.FindAllStringSubmatch(prose(string(b)), -1) {
			target := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
				continue
			}
			checked++
			path, fragment, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: no such file or directory", rel, target)
					continue
				}
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: a fragment into a file that is not Markdown", rel, target)
				continue
			}
			ids, ok := cache[dest]
			if !ok {
				d, err := os.ReadFile(dest)
				if err != nil {
					t.Fatal(err)
				}
				ids = anchors(string(d))
				cache[dest] = ids
			}
			if !ids[fragment] {
				t.Errorf("%s: link %s: no heading with id %q there", rel, target, fragment)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d relative links: is the link pattern still right?", checked)
	}
}

// readmeSection is the text of README.md under the heading "## name", up to the next "## ".
func readmeSection(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## "+name+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", name)
	}
	section, _, _ := strings.Cut(after, "\n## ")
	return section
}

// The README's layout names every top-level directory and every Go package, so that a reader
// finds where each concern lives from it.
func TestReadmeLayoutNamesEveryDirectoryAndPackage(t *testing.T) {
	layout := readmeSection(t, "Layout")
	named := func(dir string) bool {
		return strings.Contains(layout, "`"+dir+"`") || strings.Contains(layout, "`"+dir+"/")
	}
	top, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range top {
		if d.IsDir() && d.Name() != ".git" && d.Name() != "bin" && !named(d.Name()) {
			t.Errorf("README's layout does not name the directory %s/", d.Name())
		}
	}
	packages := map[string]bool{}
	err = filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repo && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			dir, _ := filepath.Rel(repo, filepath.Dir(p))
			packages[filepath.ToSlash(dir)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) < 20 {
		t.Fatalf("found %d Go packages", len(packages))
	}
	for dir := range packages {
		if !named(dir) {
			t.Errorf("README's layout does not name the package %s", dir)
		}
	}
}

// make help and the README agree: the README names every documented target as `make target`,
// and every `make target` it names exists.
func TestReadmeNamesTheMakeTargets(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_/-]+):.*## `).FindAllSubmatch(mk, -1) {
		documented[string(m[1])] = true
	}
	if len(documented) < 5 {
		t.Fatalf("found %d documented targets in the Makefile", len(documented))
	}
	for target := range documented {
		if !strings.Contains(string(readme), "`make "+target+"`") {
			t.Errorf("README does not name `make %s`", target)
		}
	}
	for _, m := range regexp.MustCompile("`make ([a-zA-Z0-9_/-]+)").FindAllSubmatch(readme, -1) {
		if !documented[string(m[1])] {
			t.Errorf("README names `make %s`, which the Makefile does not document", m[1])
		}
	}
}

// docs/contract.md names every event type and every reason the code defines: string constants
// "io.scoreflow.…" and constants of type Reason in the packages functions ship with.
func TestContractNamesEveryTypeAndReason(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	err = filepath.WalkDir(filepath.Join(repo, "pkg"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				reason := false
				switch typ := v.Type.(type) {
				case *ast.Ident:
					reason = typ.Name == "Reason"
				case *ast.SelectorExpr:
					reason = typ.Sel.Name == "Reason"
				}
				for i, value := range v.Values {
					lit, ok := value.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, _ := strconv.Unquote(lit.Value)
					if reason || strings.HasPrefix(s, "io.scoreflow.") {
						rel, _ := filepath.Rel(repo, p)
						found[s] = rel + " " + v.Names[i].Name
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 25 {
		t.Fatalf("found %d types and reasons in pkg/", len(found))
	}
	for s, where := range found {
		if !strings.Contains(string(doc), "`"+s+"`") {
			t.Errorf("docs/contract.md does not name %s (%s)", s, where)
		}
	}
}
