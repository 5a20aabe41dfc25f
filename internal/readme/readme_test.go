// Package readme checks the project README: every Go block in it is a
// gofmt-formatted file that compiles and passes go vet, so the code users
// copy cannot rot.
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
const maxReadme = 15 << 10

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

// goBlocks returns the README's ```go blocks in order.
func goBlocks(t *testing.T, text []byte) []block {
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
		t.Fatalf("README.md:%d: ```go block never closed", cur.line-1)
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
	blocks := goBlocks(t, text)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	if isTest(blocks[0].code) {
		t.Fatalf("README.md:%d: the first Go block must be the program, not a test", blocks[0].line)
	}

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
			t.Errorf("README.md:%d: a Go block must be a whole file, starting with its package clause", b.line)
			continue
		}
		if got, err := format.Source([]byte(b.code)); err != nil {
			t.Errorf("README.md:%d: %v", b.line, err)
			continue
		} else if string(got) != b.code {
			t.Errorf("README.md:%d: block is not gofmt-formatted; want:\n%s", b.line, got)
		}
		// The directory is named after the block's README line, so that
		// go vet's positions can be turned back into README lines.
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
		t.Errorf("go vet: %v\n%s", err, readmeLines(string(out), blocks[0].line))
	}
}

// position is a file position in go vet's output: lineN/file.go:L.
var position = regexp.MustCompile(`line(\d+)/(main\.go|main_test\.go|program\.go):(\d+)`)

// readmeLines rewrites the positions in go vet's output as README.md:line.
// program is the README line of the program test blocks are vetted with.
func readmeLines(out string, program int) string {
	return position.ReplaceAllStringFunc(out, func(m string) string {
		p := position.FindStringSubmatch(m)
		start, _ := strconv.Atoi(p[1])
		line, _ := strconv.Atoi(p[3])
		if p[2] == "program.go" {
			start = program
		}
		return fmt.Sprintf("README.md:%d", start+line-1)
	})
}
