package envoy

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Loader reads the configuration files under a directory, as the reference
// reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config: every regular file below
// Dir (symbolic links to files followed, to directories not), in name
// order. A Loader is not safe for concurrent use.
type Loader struct {
	// Dir is the directory holding the files.
	Dir string
	// IgnoreDotFiles skips files and directories whose name starts with
	// '.' (RUNTIME_IGNOREDOTFILES; set it for Kubernetes ConfigMap mounts).
	IgnoreDotFiles bool
	// Options are passed to ParseConfig.
	Options ConfigOptions

	sum     [sha256.Size]byte
	hasLoad bool
}

// Load reads and parses the files. changed is false, and cfg nil, when the
// files are byte for byte those of the last successful Load. A set of files
// that does not parse is an error and leaves the last successful load as
// the reference for the next call's changed.
func (l *Loader) Load() (cfg *Config, changed bool, err error) {
	files, err := l.read()
	if err != nil {
		return nil, false, err
	}
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write(f.Data)
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if l.hasLoad && sum == l.sum {
		return nil, false, nil
	}
	cfg, err = ParseConfig(files, l.Options)
	if err != nil {
		return nil, false, err
	}
	l.sum, l.hasLoad = sum, true
	return cfg, true, nil
}

// Watch calls Load every interval until ctx ends and passes each changed
// config to apply. A set of files that does not load is logged once per
// distinct error and passed to refused (if not nil), and the config last
// applied keeps serving.
func (l *Loader) Watch(ctx context.Context, interval time.Duration, logger *slog.Logger, apply func(*Config), refused func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cfg, changed, err := l.Load()
		if err != nil {
			if msg := err.Error(); msg != lastErr {
				logger.Error("config reload refused; the last good config keeps serving", "dir", l.Dir, "err", err)
				lastErr = msg
				if refused != nil {
					refused(err)
				}
			}
			continue
		}
		lastErr = ""
		if changed {
			apply(cfg)
			logger.Info("config reloaded", "dir", l.Dir, "domains", cfg.Domains())
		}
	}
}

func (l *Loader) read() ([]File, error) {
	// Resolved at each read: a root that is a symbolic link swapped to a
	// new directory (RUNTIME_ROOT's usual "current") is followed.
	dir, err := filepath.EvalSymlinks(l.Dir)
	if err != nil {
		return nil, err
	}
	var files []File
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
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, File{Name: rel, Data: data})
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, err
}
