// Package readme checks the project README: every Go block in it is a
// gofmt-formatted file that compiles and passes go vet, so the code users
// copy cannot rot. The Go blocks of docs/*.md that are whole files (they
// start with a package clause) are checked the same way; the others are
// fragments, read in the context of their page.
//
// Each block must be a whole file, starting with its package clause. The
// test puts each in a package of its own, in a fresh module that requires
// this one through a replace directive — as a user who pasted it would —
// with two known completions:
//
//   - a package main without func main (a router swapped into the program
//     above it) gets an empty func main;
//   - a block declaring a Test function is main_test.go, vetted next to the
//     README's first block, the complete program it tests.
package readme

import (
	"bufio"
	"bytes"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxReadme is the README's budget: a user reads it in ten minutes.
const maxReadme = 15000

// block is one ```go block of the README.
type block struct {
	line int // README line of its first line of code
	code string
}

func readme(t *testing.T) (root string, text []byte) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	text, err = os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return root, text
}

// goBlocks returns the ```go blocks of the file name in order.
func goBlocks(t *testing.T, name string, text []byte) []block {
	t.Helper()
	var (
		blocks []block
		cur    *block
		buf    strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{line: n + 1}
			buf.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = buf.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			buf.WriteString(line)
			buf.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: ```go block never closed", name, cur.line-1)
	}
	return blocks
}

func isTest(code string) bool { return strings.Contains(code, "\nfunc Test") }

func TestReadmeSize(t *testing.T) {
	_, text := readme(t)
	if len(text) > maxReadme {
		t.Errorf("README.md is %d bytes, over its budget of %d: move details to docs/", len(text), maxReadme)
	}
}

func TestReadmeGoBlocks(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	root, text := readme(t)
	blocks := goBlocks(t, "README.md", text)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	if isTest(blocks[0].code) {
		t.Fatalf("README.md:%d: the first Go block must be the program, not a test", blocks[0].line)
	}
	vet(t, goCmd, root, "README.md", blocks)
}

func TestDocsGoBlocks(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	root, _ := readme(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		name := filepath.Join("docs", filepath.Base(page))
		t.Run(filepath.Base(page), func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(page)
			if err != nil {
				t.Fatal(err)
			}
			var files []block
			for _, b := range goBlocks(t, name, text) {
				if strings.HasPrefix(b.code, "package ") {
					files = append(files, b)
				}
			}
			if len(files) == 0 {
				return
			}
			if isTest(files[0].code) {
				t.Fatalf("%s:%d: a test block needs the program before it", name, files[0].line)
			}
			vet(t, goCmd, root, name, files)
		})
	}
}

// vet writes blocks, the Go blocks of the file name, as packages of a fresh
// module that requires this one, and runs go vet on them. blocks[0] is the
// program a test block is vetted with.
func vet(t *testing.T, goCmd, root, name string, blocks []block) {
	t.Helper()
	mod := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(mod, "go.mod"), fmt.Sprintf(
		"module readmesnippets\n\ngo 1.26.0\n\nrequire github.com/sluicehq/ratelimit v0.0.0\n\nreplace github.com/sluicehq/ratelimit => %s\n", root))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(mod, "go.sum"), string(sum))

	for _, b := range blocks {
		if !strings.HasPrefix(b.code, "package ") {
			t.Errorf("%s:%d: a Go block must be a whole file, starting with its package clause", name, b.line)
			continue
		}
		if got, err := format.Source([]byte(b.code)); err != nil {
			t.Errorf("%s:%d: %v", name, b.line, err)
			continue
		} else if string(got) != b.code {
			t.Errorf("%s:%d: block is not gofmt-formatted; want:\n%s", name, b.line, got)
		}
		// The directory is named after the block's line, so that go vet's
		// positions can be turned back into lines of the page.
		dir := filepath.Join(mod, fmt.Sprintf("line%d", b.line))
		if isTest(b.code) {
			write(filepath.Join(dir, "main_test.go"), b.code)
			write(filepath.Join(dir, "program.go"), blocks[0].code)
			continue
		}
		code := b.code
		if strings.HasPrefix(code, "package main\n") && !strings.Contains(code, "\nfunc main() {") {
			code += "\nfunc main() {}\n"
		}
		write(filepath.Join(dir, "main.go"), code)
	}
	if t.Failed() {
		return
	}

	// go vet type-checks every file, tests included, as the compiler would,
	// then runs its analyzers; nothing needs linking.
	cmd := exec.Command(goCmd, "vet", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go vet: %v\n%s", err, pageLines(string(out), name, blocks[0].line))
	}
}

// position is a file position in go vet's output: lineN/file.go:L.
var position = regexp.MustCompile(`line(\d+)/(main\.go|main_test\.go|program\.go):(\d+)`)

// pageLines rewrites the positions in go vet's output as name:line.
// program is the line of the program test blocks are vetted with.
func pageLines(out, name string, program int) string {
	return position.ReplaceAllStringFunc(out, func(m string) string {
		p := position.FindStringSubmatch(m)
		start, _ := strconv.Atoi(p[1])
		line, _ := strconv.Atoi(p[3])
		if p[2] == "program.go" {
			start = program
		}
		return fmt.Sprintf("%s:%d", name, start+line-1)
	})
}
