package fileops

import (
	"bytes"
	"errors"
	"os"
	"path"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds on tree operations.
const (
	// maxPatternBytes bounds glob and grep patterns (the API documents 1024).
	maxPatternBytes = 1024
	// defaultResults and maxResults bound glob results and grep matches.
	defaultResults = 1000
	maxResults     = 10_000
	// maxWalkEntries bounds the entries a glob or grep visits.
	maxWalkEntries = 200_000
	// maxGrepBytes bounds the bytes one grep reads in total.
	maxGrepBytes = 256 << 20
	// binarySniffBytes is how much of a file grep inspects for a NUL byte.
	binarySniffBytes = 8 << 10
	// maxMatchLineBytes cuts reported lines.
	maxMatchLineBytes = 4096
	// maxCopyEntries bounds a recursive copy (the API documents 10000).
	maxCopyEntries = 10_000
	// maxProgramInstructions bounds a compiled regular expression: RE2 runs in linear time,
	// but the constant is the program's size, and a 24-byte pattern with a repetition count
	// compiles to tens of thousands of instructions.
	maxProgramInstructions = 4096
	// maxGrepTime bounds one grep's wall time; the result is truncated past it.
	maxGrepTime = 20 * time.Second
	// maxResultBytes bounds the paths and lines one glob or grep returns, well inside the
	// response frame.
	maxResultBytes = 16 << 20
)

// checkProgramSize refuses regular expressions whose compiled program is too large.
func checkProgramSize(expr string) error {
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad regular expression: %v", err)
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad regular expression: %v", err)
	}
	if len(prog.Inst) > maxProgramInstructions {
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "regular expression too complex (%d instructions, at most %d)", len(prog.Inst), maxProgramInstructions)
	}
	return nil
}

// errStop ends a walk early without an error.
var errStop = errors.New("stop walking")

// walkFunc visits one entry: dirfd holds name; rel is its path relative to the walk's start.
// Returning descend=true for a directory walks into it.
type walkFunc func(dirfd int, name, rel string, st *unix.Stat_t) (descend bool, err error)

// walk visits the entries beneath the directory fd, never following symlinks, with a budget
// on entries.
func walk(fd int, rel string, depth int, budget *int, fn walkFunc) error {
	if depth >= maxDepth {
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "directory tree deeper than %d", maxDepth)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return fromErrno("dup", err)
	}
	dir := os.NewFile(uintptr(dup), "dir")
	defer dir.Close()
	var names []string
	for {
		batch, err := dir.Readdirnames(readdirBatch)
		names = append(names, batch...)
		if len(names) > *budget {
			return errStop
		}
		if err != nil || len(batch) == 0 {
			break
		}
	}
	slices.Sort(names)
	for _, n := range names {
		if *budget <= 0 {
			return errStop
		}
		*budget--
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // vanished
		}
		childRel := n
		if rel != "" {
			childRel = rel + "/" + n
		}
		descend, err := fn(fd, n, childRel, &st)
		if err != nil {
			return err
		}
		if descend && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // replaced by a symlink or removed meanwhile: not followed
			}
			err = walk(sub, childRel, depth+1, budget, fn)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// joinRel joins a base directory and a relative path for results relative to the root.
func joinRel(base, rel string) string {
	if base == "" || base == "." {
		return rel
	}
	return base + "/" + rel
}

func boundedCount(requested uint32) (int, error) {
	switch {
	case requested == 0:
		return defaultResults, nil
	case requested > maxResults:
		return 0, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "at most %d results", maxResults)
	}
	return int(requested), nil
}

func (r *Root) openDir(base []byte) (int, string, error) {
	p := "."
	if len(base) > 0 {
		var err error
		if p, err = checkPath(base); err != nil {
			return -1, "", err
		}
	}
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", fromErrno("open directory", err)
	}
	return fd, p, nil
}

// glob matches paths beneath base against a pattern: path.Match per component, and "**"
// for any number of directories.
func (r *Root) glob(req *executionv1.Glob) (*executionv1.GlobResult, error) {
	pattern := string(req.GetPattern())
	if pattern == "" || len(pattern) > maxPatternBytes || strings.IndexByte(pattern, 0) >= 0 || pattern[0] == '/' {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "pattern must be 1..%d bytes, relative, without NUL", maxPatternBytes)
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad pattern: %v", err)
	}
	limit, err := boundedCount(req.GetMaxResults())
	if err != nil {
		return nil, err
	}
	fd, base, err := r.openDir(req.GetBase())
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	comps := mergeDoubleStars(strings.Split(strings.Trim(pattern, "/"), "/"))
	res := &executionv1.GlobResult{}
	budget := maxWalkEntries
	resultBytes := 0
	err = walk(fd, "", 0, &budget, passReserved(mayBeRoot(base), func(_ int, _, rel string, st *unix.Stat_t) (bool, error) {
		parts := strings.Split(rel, "/")
		if matchComponents(comps, parts) {
			if len(res.Paths) == limit || resultBytes+len(rel)+len(base) > maxResultBytes {
				res.Truncated = true
				return false, errStop
			}
			p := joinRel(base, rel)
			resultBytes += len(p)
			res.Paths = append(res.Paths, []byte(p))
		}
		return st.Mode&unix.S_IFMT == unix.S_IFDIR && couldMatchBelow(comps, parts), nil
	}))
	if errors.Is(err, errStop) {
		res.Truncated = true
	} else if err != nil {
		return nil, err
	}
	slices.SortFunc(res.Paths, bytes.Compare)
	return res, nil
}

// matchComponents matches path components against pattern components ("**" = any run of
// components). Memoised over (pattern index, path index): linear in their product whatever
// the number of "**", instead of exponential.
func matchComponents(pat, parts []string) bool {
	memo := make([]int8, (len(pat)+1)*(len(parts)+1)) // 0 unknown, 1 match, 2 no match
	var match func(i, j int) bool
	match = func(i, j int) bool {
		k := i*(len(parts)+1) + j
		if memo[k] != 0 {
			return memo[k] == 1
		}
		var ok bool
		switch {
		case i == len(pat):
			ok = j == len(parts)
		case pat[i] == "**":
			ok = match(i+1, j) || (j < len(parts) && match(i, j+1))
		case j == len(parts):
			ok = false
		default:
			m, _ := path.Match(pat[i], parts[j])
			ok = m && match(i+1, j+1)
		}
		memo[k] = 2
		if ok {
			memo[k] = 1
		}
		return ok
	}
	return match(0, 0)
}

// mergeDoubleStars collapses runs of "**": they match exactly what one does.
func mergeDoubleStars(comps []string) []string {
	out := comps[:0:0]
	for _, c := range comps {
		if c == "**" && len(out) > 0 && out[len(out)-1] == "**" {
			continue
		}
		out = append(out, c)
	}
	return out
}

// couldMatchBelow reports whether some path beneath parts could still match pat, so walks
// only descend where a match is possible.
func couldMatchBelow(pat, parts []string) bool {
	if len(pat) == 0 {
		return false
	}
	if pat[0] == "**" {
		return true
	}
	if len(parts) == 0 {
		return true
	}
	ok, _ := path.Match(pat[0], parts[0])
	return ok && couldMatchBelow(pat[1:], parts[1:])
}

func (r *Root) grep(req *executionv1.Grep, lim Limits) (*executionv1.GrepResult, error) {
	expr := req.GetPattern()
	if expr == "" || len(expr) > maxPatternBytes {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "pattern must be 1..%d bytes", maxPatternBytes)
	}
	if req.GetIgnoreCase() {
		expr = "(?i)" + expr
	}
	if err := checkProgramSize(expr); err != nil {
		return nil, err
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad regular expression: %v", err)
	}
	deadline := time.Now().Add(maxGrepTime)
	include := string(req.GetInclude())
	if include != "" {
		if _, err := path.Match(include, ""); err != nil || len(include) > maxPatternBytes {
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad include pattern")
		}
	}
	limit, err := boundedCount(req.GetMaxMatches())
	if err != nil {
		return nil, err
	}
	res := &executionv1.GrepResult{}
	totalBytes, resultBytes := 0, 0
	search := func(dirfd int, name, rel string, st *unix.Stat_t) (bool, error) {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return true, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return false, nil
		}
		if include != "" {
			if ok, _ := path.Match(include, name); !ok {
				return false, nil
			}
		}
		if uint64(st.Size) > lim.MaxFileBytes || totalBytes+int(st.Size) > maxGrepBytes {
			res.FilesSkipped++
			return false, nil
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			res.FilesSkipped++
			return false, nil
		}
		f := os.NewFile(uintptr(fd), "file")
		data := make([]byte, st.Size)
		n, _ := f.ReadAt(data, 0)
		f.Close()
		data = data[:n]
		totalBytes += n
		if bytes.IndexByte(data[:min(len(data), binarySniffBytes)], 0) >= 0 {
			res.FilesSkipped++
			return false, nil
		}
		res.FilesSearched++
		line := uint64(0)
		for len(data) > 0 {
			if line%1024 == 0 && time.Now().After(deadline) {
				res.Truncated = true
				return false, errStop
			}
			line++
			end := bytes.IndexByte(data, '\n')
			text := data
			if end >= 0 {
				text, data = data[:end], data[end+1:]
			} else {
				data = nil
			}
			if re.Match(text) {
				if len(res.Matches) == limit || resultBytes+len(rel)+min(len(text), maxMatchLineBytes) > maxResultBytes {
					res.Truncated = true
					return false, errStop
				}
				resultBytes += len(rel) + min(len(text), maxMatchLineBytes)
				res.Matches = append(res.Matches, &executionv1.GrepMatch{Path: []byte(rel), LineNumber: line, Line: bytes.Clone(text[:min(len(text), maxMatchLineBytes)])})
			}
		}
		return false, nil
	}
	start := "."
	if len(req.GetPath()) > 0 {
		if start, err = checkPath(req.GetPath()); err != nil {
			return nil, err
		}
	}
	// A single file, or a directory to walk.
	fd, err := r.resolve(start, unix.O_PATH)
	if err != nil {
		return nil, fromErrno("open", err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return nil, fromErrno("fstat", err)
	}
	budget := maxWalkEntries
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		dirfd, base, err := r.openDir([]byte(start))
		if err != nil {
			return nil, err
		}
		defer unix.Close(dirfd)
		err = walk(dirfd, "", 0, &budget, passReserved(mayBeRoot(base), func(d int, name, rel string, st *unix.Stat_t) (bool, error) {
			return search(d, name, joinRel(base, rel), st)
		}))
		if errors.Is(err, errStop) {
			res.Truncated = true
		} else if err != nil {
			return nil, err
		}
		return res, nil
	}
	dirfd, name, err := r.openParent(start)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	var fst unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &fst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fromErrno("stat", err)
	}
	if _, err := search(dirfd, name, start, &fst); err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	return res, nil
}
