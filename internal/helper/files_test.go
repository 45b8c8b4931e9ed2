package helper_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/precondition"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

const (
	codeEscape   = helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE
	codeInvalid  = helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
	codeNotFound = helperv1.ErrorCode_ERROR_CODE_NOT_FOUND
	codeExists   = helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS
	codeWrong    = helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE
	codeExhaust  = helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED
	codeVersion  = helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH
)

func TestWriteReadStatListRoundTrip(t *testing.T) {
	root, _ := workspace(t)
	wantCode(t, root, writeOp("notes/a.txt", "x", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY), codeNotFound)
	mkdirRes := mustFile(t, root, mkdirOp("notes", false)).GetMkdir()
	if mkdirRes.GetInfo().GetType() != executionv1.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("mkdir result %v", mkdirRes)
	}
	info := mustFile(t, root, writeOp("notes/a.txt", "hello\nworld\n", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY)).GetWrite().GetInfo()
	if info.GetSize() != 12 || info.GetVersion() == "" || info.GetMode() != 0o644 {
		t.Fatalf("write info %v", info)
	}
	read := mustFile(t, root, readOp("notes/a.txt")).GetRead()
	if string(read.GetContent()) != "hello\nworld\n" || read.GetMore() || read.GetInfo().GetVersion() != info.GetVersion() {
		t.Fatalf("read %v", read)
	}
	part := mustFile(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("notes/a.txt"), Offset: 6, Length: 3}}}).GetRead()
	if string(part.GetContent()) != "wor" || !part.GetMore() {
		t.Fatalf("ranged read %q more=%v", part.GetContent(), part.GetMore())
	}
	stat := mustFile(t, root, statOp("notes/a.txt")).GetStat().GetInfo()
	if stat.GetVersion() != info.GetVersion() || stat.GetType() != executionv1.FileType_FILE_TYPE_REGULAR {
		t.Fatalf("stat %v", stat)
	}
	rootInfo := mustFile(t, root, statOp(".")).GetStat().GetInfo()
	if rootInfo.GetType() != executionv1.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("stat . = %v", rootInfo)
	}
	list := mustFile(t, root, listOp("notes", 0, nil)).GetList()
	if len(list.GetEntries()) != 1 || string(list.GetEntries()[0].GetPath()) != "a.txt" || len(list.GetNextPageToken()) != 0 {
		t.Fatalf("list %v", list)
	}
}

func TestWriteModes(t *testing.T) {
	root, _ := workspace(t)
	v1 := mustFile(t, root, writeOp("f", "one", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY)).GetWrite().GetInfo().GetVersion()
	wantCode(t, root, writeOp("f", "two", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY), codeExists)
	cas := func(content, version string) *executionv1.FileOperation {
		return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
			Path: []byte("f"), Content: []byte(content), Mode: executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, ExpectedVersion: version}}}
	}
	v2 := mustFile(t, root, cas("two", v1)).GetWrite().GetInfo().GetVersion()
	if v2 == v1 {
		t.Fatal("version did not change on write")
	}
	wantCode(t, root, cas("three", v1), codeVersion) // stale version
	if data, _ := os.ReadFile(filepath.Join(root, "f")); string(data) != "two" {
		t.Fatalf("a refused CAS changed the file: %q", data)
	}
	wantCode(t, root, cas("x", ""), codeInvalid)
	wantCode(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte("missing"), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, ExpectedVersion: v2}}}, codeNotFound)
	mustFile(t, root, writeOp("f", "four", executionv1.WriteMode_WRITE_MODE_OVERWRITE))
	wantCode(t, root, writeOp("f", "x", executionv1.WriteMode_WRITE_MODE_UNSPECIFIED), codeInvalid)
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantCode(t, root, writeOp("d", "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE), codeWrong)
	// An in-place change by a command (same inode) changes the version too.
	before := mustFile(t, root, statOp("f")).GetStat().GetInfo().GetVersion()
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("FOUR"), 0o644); err != nil {
		t.Fatal(err)
	}
	if after := mustFile(t, root, statOp("f")).GetStat().GetInfo().GetVersion(); after == before {
		t.Fatal("in-place modification kept the version")
	}
	leftovers, _ := filepath.Glob(filepath.Join(root, ".execplane-*"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left behind: %v", leftovers)
	}
}

func TestDotDotInEveryPosition(t *testing.T) {
	root, outside := workspace(t)
	if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	escapes := []string{"..", "../outside/secret", "a/../../outside/secret", "./../outside/secret", "a/b/../../../outside/secret", "../ws/../outside/secret"}
	for _, p := range escapes {
		t.Run(p, func(t *testing.T) {
			for name, op := range map[string]*executionv1.FileOperation{
				"read":   readOp(p),
				"write":  writeOp(p, "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE),
				"stat":   statOp(p),
				"list":   listOp(p, 0, nil),
				"mkdir":  mkdirOp(p+"/new", true),
				"remove": removeOp(p, true),
				"rename": renameOp(p, "stolen"),
				"copy":   copyOp(p, "stolen", true),
				"grep":   grepOp("S", p),
			} {
				_, e := fileCall(t, root, op)
				if e == nil {
					t.Fatalf("%s %q succeeded", name, p)
				}
				// NOT_FOUND: the kernel stopped at a missing component before reaching "..".
				if c := e.GetCode(); c != codeEscape && c != codeInvalid && c != codeNotFound {
					t.Fatalf("%s %q: want PATH_ESCAPE, INVALID_ARGUMENT or NOT_FOUND, got %v (%s)", name, p, c, e.GetMessage())
				}
			}
			entries, _ := os.ReadDir(root)
			if len(entries) != 1 || entries[0].Name() != "a" {
				t.Fatalf("a refused operation changed the workspace: %v", entries)
			}
			if sub, _ := os.ReadDir(filepath.Join(root, "a")); len(sub) != 0 {
				t.Fatalf("a refused operation created %v", sub)
			}
		})
	}
	// ".." that stays beneath the root is fine.
	mustFile(t, root, writeOp("a/../inside", "ok", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY))
	if _, err := os.Stat(filepath.Join(root, "inside")); err != nil {
		t.Fatal(err)
	}
	assertOutsideUntouched(t, outside)
}

func TestAbsolutePathsRefused(t *testing.T) {
	root, outside := workspace(t)
	for _, p := range []string{"/etc/passwd", filepath.Join(outside, "secret"), "/", "//"} {
		wantCode(t, root, readOp(p), codeEscape)
		wantCode(t, root, writeOp(p, "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE), codeEscape)
	}
	assertOutsideUntouched(t, outside)
}

func TestSymlinkInsideRootPointingOutside(t *testing.T) {
	root, outside := workspace(t)
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "abs-link")))
	must(t, os.Symlink("../outside/secret", filepath.Join(root, "rel-link")))
	must(t, os.Symlink(outside, filepath.Join(root, "dir-link")))
	for _, link := range []string{"abs-link", "rel-link"} {
		wantCode(t, root, readOp(link), codeEscape)
		wantCode(t, root, grepOp("SECRET", link), codeEscape)
		// stat describes the link itself, never its target.
		info := mustFile(t, root, statOp(link)).GetStat().GetInfo()
		if info.GetType() != executionv1.FileType_FILE_TYPE_SYMLINK {
			t.Fatalf("stat %s followed the link: %v", link, info)
		}
		// compare-and-swap through the link cannot match (the link is not a regular file).
		wantCode(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
			Path: []byte(link), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, ExpectedVersion: "v1-x"}}}, codeVersion)
		// copy never follows the source link out of the root... it copies the link itself.
		wantCode(t, root, copyOp(link, "copied-"+link, false), codeWrong)
	}
	// list and everything beneath a link to an outside directory is an escape.
	wantCode(t, root, listOp("dir-link", 0, nil), codeEscape)
	wantCode(t, root, readOp("dir-link/secret"), codeEscape)
	wantCode(t, root, writeOp("dir-link/secret", "PWNED", executionv1.WriteMode_WRITE_MODE_OVERWRITE), codeEscape)
	wantCode(t, root, writeOp("dir-link/new", "PWNED", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY), codeEscape)
	wantCode(t, root, mkdirOp("dir-link/sub", true), codeEscape)
	wantCode(t, root, removeOp("dir-link/secret", false), codeEscape)
	wantCode(t, root, renameOp("dir-link/secret", "mine"), codeEscape)
	wantCode(t, root, renameOp("mine", "dir-link/x"), codeEscape)
	// Overwriting the link (write/truncate) replaces the link, never the file it names.
	mustFile(t, root, writeOp("abs-link", "replaced", executionv1.WriteMode_WRITE_MODE_OVERWRITE))
	if st, err := os.Lstat(filepath.Join(root, "abs-link")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("link not replaced by a regular file: %v %v", st, err)
	}
	// Removing a link removes the link only, recursive or not.
	mustFile(t, root, removeOp("dir-link", true))
	assertOutsideUntouched(t, outside)
}

func TestSymlinkToDirectoryOutsideThenFile(t *testing.T) {
	root, outside := workspace(t)
	must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	must(t, os.Symlink("../../outside", filepath.Join(root, "sub", "up")))
	for _, op := range []*executionv1.FileOperation{
		readOp("sub/up/secret"), statOp("sub/up/secret"), listOp("sub/up", 0, nil),
		writeOp("sub/up/secret", "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE),
		writeOp("sub/up/planted", "x", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY),
		{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte("sub/up/deep/planted"), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, CreateParents: true}}},
		copyOp("sub/up/secret", "copy", false), removeOp("sub/up/secret", false),
	} {
		wantCode(t, root, op, codeEscape)
	}
	// Walks never follow the link.
	glob := mustFile(t, root, globOp("**/secret")).GetGlob()
	grep := mustFile(t, root, grepOp("SECRET", "")).GetGrep()
	if len(glob.GetPaths()) != 0 || len(grep.GetMatches()) != 0 {
		t.Fatalf("walk followed a symlink out: glob %v grep %v", glob, grep)
	}
	assertOutsideUntouched(t, outside)
}

// An attacker flips a path component between a directory and a symlink to the outside in a
// tight loop while the helper reads and writes through it: no operation may read or write
// outside. The ADVERSARIAL floor is 10,000 operations.
func TestSymlinkSwapRace(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 helper processes: not in -short")
	}
	root, outside := workspace(t)
	must(t, os.Mkdir(filepath.Join(root, "real"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "real", "secret"), []byte("inside"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(root, "evil")))
	stop := make(chan struct{})
	var flips atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, real, evil, tmp := filepath.Join(root, "a"), filepath.Join(root, "real"), filepath.Join(root, "evil"), filepath.Join(root, "tmp")
		must(t, os.Rename(real, a))
		for {
			select {
			case <-stop:
				return
			default:
			}
			// a: directory → symlink to outside → directory ...
			_ = os.Rename(a, tmp)
			_ = os.Rename(evil, a)
			_ = os.Rename(a, evil)
			_ = os.Rename(tmp, a)
			flips.Add(1)
		}
	}()
	const ops = 10_000
	const workers = 4
	var escapes, reads, writes, refusedEscape, refusedAbsent atomic.Int64
	var opWG sync.WaitGroup
	for w := range workers {
		opWG.Add(1)
		go func() {
			defer opWG.Done()
			for i := w; i < ops; i += workers {
				var op *executionv1.FileOperation
				if i%2 == 0 {
					op = readOp("a/secret")
				} else {
					op = writeOp("a/planted", "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE)
				}
				res, e := fileCall(t, root, op)
				switch {
				case e.GetCode() == helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE:
					refusedEscape.Add(1) // resolved while a was the outward symlink
				case e.GetCode() == helperv1.ErrorCode_ERROR_CODE_NOT_FOUND:
					refusedAbsent.Add(1) // resolved between the renames, when a did not exist
				case e != nil:
					t.Errorf("operation %d: an unexpected refusal: %v", i, e)
				case res.GetRead() != nil:
					reads.Add(1)
					if bytes.Contains(res.GetRead().GetContent(), []byte("SECRET")) {
						escapes.Add(1)
					}
				default:
					writes.Add(1)
				}
			}
		}()
	}
	opWG.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d operations, %d component flips: %d reads and %d writes inside, %d refused as escapes, %d as absent",
		ops, flips.Load(), reads.Load(), writes.Load(), refusedEscape.Load(), refusedAbsent.Load())
	if escapes.Load() != 0 {
		t.Fatalf("%d reads returned the outside secret", escapes.Load())
	}
	if flips.Load() < 100 {
		t.Fatalf("the attacker only flipped %d times: the race was not exercised", flips.Load())
	}
	if n := reads.Load() + writes.Load() + refusedEscape.Load() + refusedAbsent.Load(); n != ops {
		t.Fatalf("%d of %d operations accounted for", n, ops)
	}
	// Both sides of the race were hit: operations that resolved through the directory and
	// succeeded, and operations that met the outward symlink and were refused as escapes.
	if reads.Load() == 0 || refusedEscape.Load() == 0 {
		t.Fatalf("the race was one-sided: %d reads inside, %d escapes refused", reads.Load(), refusedEscape.Load())
	}
	assertOutsideUntouched(t, outside)
}

func TestHardLinkToFileOutsideIsNeverWrittenThrough(t *testing.T) {
	root, outside := workspace(t)
	must(t, os.Link(filepath.Join(outside, "secret"), filepath.Join(root, "hard")))
	mustFile(t, root, writeOp("hard", "overwritten", executionv1.WriteMode_WRITE_MODE_OVERWRITE))
	assertOutsideUntouched(t, outside)
	mustFile(t, root, removeOp("hard", false))
	assertOutsideUntouched(t, outside)
}

func TestSpecialFilesRefusedWithoutHanging(t *testing.T) {
	root, _ := workspace(t)
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	targets := []string{"fifo", "sock"}
	// A character device (/dev/null's numbers) where this user may create one.
	if err := syscall.Mknod(filepath.Join(root, "dev"), syscall.S_IFCHR|0o644, 1<<8|3); err == nil {
		targets = append(targets, "dev")
	} else {
		t.Logf("mknod not permitted here (%v): device case not exercised", err)
	}
	for _, p := range targets {
		start := time.Now()
		_, e := fileCall(t, root, readOp(p))
		if e == nil || (e.GetCode() != codeWrong && e.GetCode() != helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED) {
			t.Fatalf("read %s: %v", p, e)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("read %s took %s", p, d)
		}
		wantCode(t, root, copyOp(p, p+".copy", false), codeWrong)
		if info := mustFile(t, root, statOp(p)).GetStat().GetInfo(); info.GetType() != executionv1.FileType_FILE_TYPE_OTHER {
			t.Fatalf("stat %s: %v", p, info)
		}
	}
}

func TestMagicLinksRefused(t *testing.T) {
	root, _ := workspace(t)
	must(t, os.Symlink("/proc/self/root", filepath.Join(root, "proc-root")))
	must(t, os.Symlink("/proc/self/fd/0", filepath.Join(root, "proc-fd")))
	wantCode(t, root, readOp("proc-root/etc/passwd"), codeEscape)
	wantCode(t, root, readOp("proc-fd"), codeEscape)
	wantCode(t, root, listOp("proc-root", 0, nil), codeEscape)
}

func TestHugeSparseFileReadIsCapped(t *testing.T) {
	root, _ := workspace(t)
	f, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	must(t, f.Truncate(1<<40)) // 1 TiB, no blocks
	f.Close()
	read := mustFile(t, root, readOp("sparse")).GetRead()
	if len(read.GetContent()) != testMaxFileBytes || !read.GetMore() || read.GetInfo().GetSize() != 1<<40 {
		t.Fatalf("read %d bytes more=%v size=%d", len(read.GetContent()), read.GetMore(), read.GetInfo().GetSize())
	}
	wantCode(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("sparse"), Length: testMaxFileBytes + 1}}}, codeExhaust)
	wantCode(t, root, copyOp("sparse", "copy", false), codeExhaust)
}

func TestOverCapWriteLeavesOldContent(t *testing.T) {
	root, _ := workspace(t)
	must(t, os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644))
	wantCode(t, root, writeOp("f", strings.Repeat("x", testMaxFileBytes+1), executionv1.WriteMode_WRITE_MODE_OVERWRITE), codeExhaust)
	if data, _ := os.ReadFile(filepath.Join(root, "f")); string(data) != "old" {
		t.Fatalf("content changed: %q", data)
	}
}

// ENOSPC in the middle of a write leaves the old content: a small tmpfs is mounted as the
// workspace (root only).
func TestENOSPCLeavesOldContent(t *testing.T) {
	root, _ := workspace(t)
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=256k"); err != nil {
		precondition.Missing(t, "cannot mount a small tmpfs here (%v)", err)
	}
	defer syscall.Unmount(root, syscall.MNT_DETACH)
	must(t, os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644))
	wantCode(t, root, writeOp("f", strings.Repeat("x", 512<<10), executionv1.WriteMode_WRITE_MODE_OVERWRITE), codeExhaust)
	if data, _ := os.ReadFile(filepath.Join(root, "f")); string(data) != "old" {
		t.Fatalf("content changed: %q", data)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(root, ".execplane-*")); len(leftovers) != 0 {
		t.Fatalf("temporary file left behind: %v", leftovers)
	}
}

func TestMillionEntryDirectoryIsPaginated(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a million files: not in -short")
	}
	root, _ := workspace(t)
	dir := filepath.Join(root, "big")
	must(t, os.Mkdir(dir, 0o755))
	const n = 1_000_000
	dfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		fd, err := syscall.Openat(dfd, "f"+itoa(i), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
	}
	syscall.Close(dfd)
	page := mustFile(t, root, listOp("big", 1000, nil)).GetList()
	if len(page.GetEntries()) != 1000 || len(page.GetNextPageToken()) == 0 {
		t.Fatalf("first page: %d entries, token %q", len(page.GetEntries()), page.GetNextPageToken())
	}
	next := mustFile(t, root, listOp("big", 1000, page.GetNextPageToken())).GetList()
	last := page.GetEntries()[999].GetPath()
	if len(next.GetEntries()) != 1000 || bytes.Compare(next.GetEntries()[0].GetPath(), last) <= 0 {
		t.Fatal("second page does not continue after the first")
	}
	wantCode(t, root, listOp("big", 1001, nil), codeInvalid)
	// Removing the tree is bounded: over 100,000 entries is refused whole, nothing removed.
	_, e := fileCall(t, root, removeOp("big", true))
	if e.GetCode() != codeExhaust {
		t.Fatalf("recursive remove of a million entries: %v", e)
	}
	again := mustFile(t, root, listOp("big", 1000, nil)).GetList()
	if len(again.GetEntries()) != 1000 || !bytes.Equal(again.GetEntries()[999].GetPath(), last) {
		t.Fatal("the refused remove removed entries")
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

func TestDeepAndLongPaths(t *testing.T) {
	root, _ := workspace(t)
	long := strings.Repeat("a", 4097)
	wantCode(t, root, readOp(long), codeInvalid)
	deep := strings.Repeat("d/", 1000) + "f"
	mustFile(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte(deep), Content: []byte("deep"), Mode: executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, CreateParents: true}}})
	if got := mustFile(t, root, readOp(deep)).GetRead().GetContent(); string(got) != "deep" {
		t.Fatalf("deep read %q", got)
	}
	_, e := fileCall(t, root, removeOp("d", true))
	if e != nil && e.GetCode() != codeExhaust {
		t.Fatalf("removing a deep tree: %v", e)
	}
	name := strings.Repeat("n", 256)
	wantCode(t, root, writeOp(name, "x", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY), codeInvalid) // ENAMETOOLONG
}

func TestNULInPathRefused(t *testing.T) {
	root, _ := workspace(t)
	wantCode(t, root, readOp("a\x00b"), codeInvalid)
	wantCode(t, root, writeOp("a\x00", "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE), codeInvalid)
}

func TestNonUTF8AndControlNamesRoundTripAsBytes(t *testing.T) {
	root, _ := workspace(t)
	names := []string{"\xff\xfe-latin1", "tab\tnewline\nbell\a", "émoji-✓"}
	for _, n := range names {
		mustFile(t, root, writeOp(n, n, executionv1.WriteMode_WRITE_MODE_CREATE_ONLY))
	}
	list := mustFile(t, root, listOp(".", 0, nil)).GetList()
	var got []string
	for _, e := range list.GetEntries() {
		got = append(got, string(e.GetPath()))
	}
	for _, n := range names {
		found := false
		for _, g := range got {
			found = found || g == n
		}
		if !found {
			t.Fatalf("%q did not round-trip: %q", n, got)
		}
		if c := mustFile(t, root, readOp(n)).GetRead().GetContent(); string(c) != n {
			t.Fatalf("content of %q: %q", n, c)
		}
	}
}

func TestRootReplacedBySymlinkRefused(t *testing.T) {
	root, outside := workspace(t)
	link := filepath.Join(filepath.Dir(root), "ws-link")
	must(t, os.Symlink(outside, link))
	r := call(t, link, &helperv1.Request{Operation: &helperv1.Request_File{File: readOp("secret")}}, callOptions{})
	if r.resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE {
		t.Fatalf("symlinked root: %v", r.resp)
	}
	missing := call(t, filepath.Join(root, "nope"), &helperv1.Request{Operation: &helperv1.Request_File{File: statOp(".")}}, callOptions{})
	if missing.resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE {
		t.Fatalf("missing root: %v", missing.resp)
	}
}

func TestDirectoryOperations(t *testing.T) {
	root, _ := workspace(t)
	mustFile(t, root, mkdirOp("x/y/z", true))
	mustFile(t, root, mkdirOp("x/y/z", true)) // parents: existing is fine
	wantCode(t, root, mkdirOp("x/y/z", false), codeExists)
	wantCode(t, root, mkdirOp("missing/child", false), codeNotFound)
	mustFile(t, root, writeOp("x/y/z/f.go", "package main // TODO fix\n", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY))
	mustFile(t, root, writeOp("x/g.txt", "nothing here\nTODO later\n", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY))
	must(t, os.WriteFile(filepath.Join(root, "x", "bin"), []byte("TODO\x00binary"), 0o644))

	glob := mustFile(t, root, globOp("**/*.go")).GetGlob()
	if len(glob.GetPaths()) != 1 || string(glob.GetPaths()[0]) != "x/y/z/f.go" {
		t.Fatalf("glob %q", glob.GetPaths())
	}
	grep := mustFile(t, root, grepOp("TODO", "x")).GetGrep()
	if len(grep.GetMatches()) != 2 || grep.GetFilesSkipped() != 1 {
		t.Fatalf("grep %v", grep)
	}
	if m := grep.GetMatches()[0]; string(m.GetPath()) != "x/g.txt" || m.GetLineNumber() != 2 {
		t.Fatalf("first match %v", m)
	}
	wantCode(t, root, grepOp("(", ""), codeInvalid)

	cp := mustFile(t, root, copyOp("x", "x2", true)).GetCopy()
	if cp.GetCopiedEntries() < 5 {
		t.Fatalf("copy %v", cp)
	}
	if data, err := os.ReadFile(filepath.Join(root, "x2", "y", "z", "f.go")); err != nil || !strings.Contains(string(data), "TODO") {
		t.Fatalf("copied tree: %q %v", data, err)
	}
	wantCode(t, root, copyOp("x", "x3", false), codeWrong)
	wantCode(t, root, copyOp("x", "x2", true), codeExists)

	mustFile(t, root, renameOp("x2", "x3"))
	wantCode(t, root, renameOp("x3", "x"), codeExists)  // no overwrite without asking
	wantCode(t, root, removeOp("x3", false), codeWrong) // not empty
	removed := mustFile(t, root, removeOp("x3", true)).GetRemove()
	if removed.GetRemoved() < 5 {
		t.Fatalf("removed %d", removed.GetRemoved())
	}
	wantCode(t, root, removeOp("x3", false), codeNotFound)
	mustFile(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: []byte("x3"), MissingOk: true}}})
	wantCode(t, root, removeOp(".", true), codeInvalid)
}

func TestListPagination(t *testing.T) {
	root, _ := workspace(t)
	for i := range 25 {
		must(t, os.WriteFile(filepath.Join(root, "f"+itoa(100+i)), nil, 0o644))
	}
	var all []string
	var token []byte
	for pages := 0; ; pages++ {
		page := mustFile(t, root, listOp(".", 10, token)).GetList()
		for _, e := range page.GetEntries() {
			all = append(all, string(e.GetPath()))
		}
		token = page.GetNextPageToken()
		if len(token) == 0 {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(all) != 25 || all[0] != "f100" || all[24] != "f124" {
		t.Fatalf("listed %v", all)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Findings of the security review, kept as regression tests.

func TestManyDoubleStarsAreLinear(t *testing.T) {
	root, _ := workspace(t)
	must(t, os.MkdirAll(filepath.Join(root, "a", "b", "c", "d", "e"), 0o755))
	start := time.Now()
	res := mustFile(t, root, globOp(strings.Repeat("**/", 300)+"zzz")).GetGlob()
	if len(res.GetPaths()) != 0 || time.Since(start) > 3*time.Second {
		t.Fatalf("glob with 300 '**' took %s", time.Since(start))
	}
}

func TestPathologicalRegularExpressionRefused(t *testing.T) {
	root, _ := workspace(t)
	wantCode(t, root, grepOp(`(?:a|aa|aaa|aaaa){1000}b`, ""), codeExhaust)
}

func TestLongNonASCIIErrorMessagesStillAnswer(t *testing.T) {
	root, _ := workspace(t)
	_, e := fileCall(t, root, grepOp("("+strings.Repeat("é", 600), ""))
	if e.GetCode() != codeInvalid {
		t.Fatalf("want INVALID_ARGUMENT, got %v", e)
	}
}

func TestDirectoryLockedByACommandDoesNotHangWrites(t *testing.T) {
	root, _ := workspace(t)
	dir, err := os.Open(root)
	must(t, err)
	defer dir.Close()
	must(t, syscall.Flock(int(dir.Fd()), syscall.LOCK_EX))
	start := time.Now()
	wantCode(t, root, writeOp("f", "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE), helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE)
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("the write waited %s for the lock", d)
	}
}

func TestRefusedCompareAndSwapCreatesNoParents(t *testing.T) {
	root, _ := workspace(t)
	wantCode(t, root, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte("new1/new2/f"), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, ExpectedVersion: "v1-x", CreateParents: true}}}, codeNotFound)
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("a refused write left %v", entries)
	}
}
