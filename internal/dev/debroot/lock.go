package debroot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockPath is the lock of the executor image's packages, from the repository's root;
// hack/executor-debs.sh writes it (resolve) and downloads what it names (fetch).
const LockPath = "hack/executor-debs.lock"

// ErrNotFetched is returned by Fetched when the locked packages are not in the cache: run
// `hack/executor-debs.sh fetch`.
var ErrNotFetched = errors.New("the locked packages are not fetched (run hack/executor-debs.sh fetch)")

// Locked is one line of the lock: a package pinned to one .deb.
type Locked struct {
	Name, Version, Architecture string
	// SHA256 is the .deb's, in hex.
	SHA256 string
	Size   int64
	// URI is where resolve found it on the mirror.
	URI string
}

// FileName is the name fetch gives the .deb, dpkg's: name_version_arch.deb with the
// epoch's colon escaped.
func (l Locked) FileName() string {
	return l.Name + "_" + strings.ReplaceAll(l.Version, ":", "%3a") + "_" + l.Architecture + ".deb"
}

// ParseLock parses a lock: '#' comments, then one package a line — name, version,
// architecture, SHA256, size, URI.
func ParseLock(data []byte) ([]Locked, error) {
	var out []Locked
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 6 {
			return nil, fmt.Errorf("lock line %d: %d fields, want 6", n, len(f))
		}
		size, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || size <= 0 {
			return nil, fmt.Errorf("lock line %d: bad size %q", n, f[4])
		}
		if sum, err := hex.DecodeString(f[3]); err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("lock line %d: bad SHA256 %q", n, f[3])
		}
		l := Locked{Name: f[0], Version: f[1], Architecture: f[2], SHA256: f[3], Size: size, URI: f[5]}
		if strings.ContainsAny(l.Name+l.Version+l.Architecture, "/_") {
			return nil, fmt.Errorf("lock line %d: bad name, version or architecture", n)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("lock line %d: %s twice", n, l.Name)
		}
		seen[l.Name] = true
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("lock names no package")
	}
	return out, nil
}

// lockKey names a lock's directory in the cache: the first 16 hex digits of its SHA256
// (what hack/executor-debs.sh fetch names it).
func lockKey(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

// DefaultCacheDir is where hack/executor-debs.sh fetch puts the packages by default:
// $EXECUTOR_DEBS_CACHE, else $CLUSTER_BIN_CACHE/executor-debs, else
// ~/.cache/execplane/executor-debs.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("EXECUTOR_DEBS_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("CLUSTER_BIN_CACHE"); d != "" {
		return filepath.Join(d, "executor-debs"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("debroot: %w", err)
	}
	return filepath.Join(d, "execplane", "executor-debs"), nil
}

// Fetched returns the paths of the packages the lock at lockPath pins, as
// hack/executor-debs.sh fetch left them under cacheDir, each checked against the lock's
// SHA256. It wraps ErrNotFetched when the lock's directory is not complete.
func Fetched(lockPath, cacheDir string) ([]string, error) {
	data, err := os.ReadFile(lockPath)
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	locked, err := ParseLock(data)
	if err != nil {
		return nil, fmt.Errorf("debroot: %s: %w", lockPath, err)
	}
	dir := filepath.Join(cacheDir, lockKey(data))
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return nil, fmt.Errorf("debroot: %s: %w", dir, ErrNotFetched)
	}
	paths := make([]string, 0, len(locked))
	for _, l := range locked {
		p := filepath.Join(dir, l.FileName())
		if err := checkSum(p, l.SHA256); err != nil {
			return nil, fmt.Errorf("debroot: %s: %w", l.Name, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// FromLock builds the root of the packages the lock at lockPath pins (LockPath, from the
// repository's root), as hack/executor-debs.sh fetch left them in DefaultCacheDir. It wraps
// ErrNotFetched when they are not there.
func FromLock(lockPath string, opts Options) (*Root, error) {
	dir, err := DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	debs, err := Fetched(lockPath, dir)
	if err != nil {
		return nil, err
	}
	return Build(debs, opts)
}

func checkSum(p, want string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s: SHA256 %s, the lock says %s", p, got, want)
	}
	return nil
}
