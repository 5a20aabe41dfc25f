package envoy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The bounds of a load, so that no set of files can keep a Loader busy:
// a file is at most maxFileBytes, all of them at most maxTotalBytes (a
// Kubernetes ConfigMap holds at most 1 MiB), and a file's YAML aliases may
// expand it to at most maxNodes nodes (see ParseConfig).
const (
	maxFileBytes  = 4 << 20
	maxTotalBytes = 32 << 20
	maxReads      = 5
)

// errUnstable is a set of files that never read the same twice in a row.
var errUnstable = errors.New("the config files changed while being read; retried at the next interval")

// Loader reads the configuration files under a directory, as the reference
// reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config: every regular file below
// Dir (symbolic links to files followed, to directories not), in name
// order. A Loader is not safe for concurrent use.
//
// A load is bounded (4 MiB a file, 32 MiB in all, and the alias bound of
// ParseConfig) and never serves a file half-written: the files are read
// until two reads in a row agree, and a set that removes rules from a
// domain (as the prefix of a file being rewritten in place does) is loaded
// only when the next Load reads it again unchanged.
type Loader struct {
	// Dir is the directory holding the files.
	Dir string
	// IgnoreDotFiles skips files and directories whose name starts with
	// '.' (RUNTIME_IGNOREDOTFILES; set it for Kubernetes ConfigMap mounts).
	IgnoreDotFiles bool
	// Options are passed to ParseConfig.
	Options ConfigOptions

	sum     [sha256.Size]byte // of the files last loaded
	rules   map[string]int    // their rules by domain
	hasLoad bool
	pending [sha256.Size]byte // of a shrinking set the last Load read
	badSum  [sha256.Size]byte // of the set last refused, with badErr
	badErr  error
}

// Load reads and parses the files. changed is false, and cfg nil, when the
// files are byte for byte those of the last successful Load, or when they
// remove rules from a domain and were not read unchanged by the previous
// Load. A set of files that does not parse is an error (parsed once: the
// same files give the same error) and leaves the last successful load as
// the reference for the next call's changed.
func (l *Loader) Load() (cfg *Config, changed bool, err error) {
	files, sum, err := l.stableRead()
	if err != nil {
		return nil, false, err
	}
	// pending is kept only while Loads in a row read the same set.
	pending := l.pending
	l.pending = [sha256.Size]byte{}
	if l.hasLoad && sum == l.sum {
		return nil, false, nil
	}
	if l.badErr != nil && sum == l.badSum {
		return nil, false, l.badErr
	}
	cfg, err = ParseConfig(files, l.Options)
	if err != nil {
		l.badSum, l.badErr = sum, err
		return nil, false, err
	}
	l.badErr = nil
	rules := cfg.ruleCounts()
	if l.hasLoad && shrinks(l.rules, rules) && sum != pending {
		l.pending = sum
		return nil, false, nil
	}
	l.sum, l.rules, l.hasLoad = sum, rules, true
	return cfg, true, nil
}

// shrinks reports whether a domain of old has fewer rules in next.
func shrinks(old, next map[string]int) bool {
	for d, n := range old {
		if next[d] < n {
			return true
		}
	}
	return false
}

// stableRead reads the files until two reads in a row agree.
func (l *Loader) stableRead() ([]File, [sha256.Size]byte, error) {
	files, sum, err := l.read()
	for i := 1; err == nil && i < maxReads; i++ {
		again, againSum, err2 := l.read()
		if err2 != nil {
			return nil, sum, err2
		}
		if againSum == sum {
			return files, sum, nil
		}
		files, sum = again, againSum
	}
	if err != nil {
		return nil, sum, err
	}
	return nil, sum, fmt.Errorf("%w: %s", errConfig, errUnstable)
}

func (l *Loader) read() ([]File, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	// Resolved at each read: a root that is a symbolic link swapped to a
	// new directory (RUNTIME_ROOT's usual "current") is followed.
	dir, err := filepath.EvalSymlinks(l.Dir)
	if err != nil {
		return nil, sum, err
	}
	var files []File
	total := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && l.IgnoreDotFiles && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			fi, err := os.Stat(path)
			if err != nil || !fi.Mode().IsRegular() {
				return nil // dangling, or a link to a directory
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := readFile(path)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", errConfig, rel, err)
		}
		if total += len(data); total > maxTotalBytes {
			return fmt.Errorf("%w: the files hold more than %d MiB", errConfig, maxTotalBytes>>20)
		}
		files = append(files, File{Name: rel, Data: data})
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write(f.Data)
		h.Write([]byte{0})
	}
	h.Sum(sum[:0])
	return files, sum, err
}

// readFile reads at most maxFileBytes of a file, and refuses a larger one.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxFileBytes+1)); err != nil {
		return nil, err
	}
	if b.Len() > maxFileBytes {
		return nil, fmt.Errorf("larger than %d MiB", maxFileBytes>>20)
	}
	return b.Bytes(), nil
}
