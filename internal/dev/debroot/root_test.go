package debroot

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/execplane/execplane/internal/dev/precondition"
)

// chrootEnv makes the test binary the chroot child (runInRoot): the root's directory.
const chrootEnv = "DEBROOT_TEST_CHROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(chrootEnv); root != "" {
		chrootChild(root, os.Args[slices.Index(os.Args, "--")+1:])
	}
	goleak.VerifyTestMain(m)
}

// executorDebs are the locked packages (hack/executor-debs.sh fetch), unpacked once for the
// tests that need the real thing: decompressing them is most of a build (seconds; minutes
// under -race).
var executorDebs = sync.OnceValues(func() ([]*deb, error) {
	dir, err := DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	paths, err := Fetched(filepath.Join("..", "..", "..", LockPath), dir)
	if err != nil {
		return nil, err
	}
	return readDebs(paths)
})

// executorRoot is the root built from executorDebs.
var executorRoot = sync.OnceValues(func() (*Root, error) {
	debs, err := executorDebs()
	if err != nil {
		return nil, err
	}
	return build(debs, Options{})
})

func needExecutorRoot(t *testing.T) *Root {
	t.Helper()
	if testing.Short() {
		precondition.Missing(t, "builds the executor image's root from its packages: not in -short")
	}
	r, err := executorRoot()
	if errors.Is(err, ErrNotFetched) {
		precondition.Missing(t, "the executor image's packages: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reviewedScripts are the packages of the lock that carry maintainer scripts that do
// something on a fresh install, and what Build does about it. A refreshed lock that brings
// a package with a preinst or postinst not listed here fails TestMaintainerScriptsReviewed:
// read the script, then add the effect to effects.go or say here why it is not needed.
var reviewedScripts = map[string]string{
	"base-files":            "postinst: /etc/profile, /root/.profile, /root/.bashrc from defaults (done); /run/lock, /var/run, /var/lock links (done); /usr/local dirs, /etc/motd, wtmp/btmp/lastlog, /var/mail (not needed)",
	"bash":                  "postinst: /bin/sh if missing (dash ships it); builtins.7 man alternative (no man pages)",
	"ca-certificates":       "postinst: update-ca-certificates: the bundle (done), per-certificate and hash links (not needed: every client here reads the bundle)",
	"coreutils":             "postinst: /usr/bin/touch link if missing (merged /usr has it)",
	"dash":                  "postinst: diverts /bin/sh to dash (the package ships /bin/sh → dash)",
	"debianutils":           "postinst: which alternative (done); /etc/shells (only login and chsh read it)",
	"git":                   "preinst, postinst: conffile moves of upgrades only",
	"less":                  "preinst: upgrades only; postinst: pager alternative (done)",
	"libc6":                 "preinst, postinst: upgrade checks, service restarts; the ldconfig trigger (not needed: the loader searches the multiarch directories itself)",
	"libgcrypt20":           "postinst: upgrade clean-up only",
	"libgssapi-krb5-2":      "postinst: upgrade migration only",
	"libpython3.11-minimal": "postinst: prints an empty sitecustomize.py to stdout",
	"mawk":                  "postinst: awk, nawk alternatives (done)",
	"netbase":               "postinst: /etc/hosts (done; a Pod's runtime mounts its own), /etc/networks (not needed)",
	"openssl":               "postinst: /usr/lib/ssl link if missing (the package ships it)",
	"procps":                "preinst, postinst: conffile moves, init scripts, alternatives only for *.procps names bookworm no longer ships",
	"python3":               "preinst, postinst: /etc/python3/debian_config (read by py3compile only), rtupdate hooks, byte compiling (not done: Python compiles in memory under a read-only root)",
	"python3-distutils":     "postinst: byte compiling (not done)",
	"python3-lib2to3":       "postinst: byte compiling (not done)",
	"python3-minimal":       "postinst: byte compiling (not done)",
	"python3-pip":           "postinst: byte compiling (not done)",
	"python3-pkg-resources": "postinst: byte compiling (not done)",
	"python3-setuptools":    "postinst: byte compiling (not done)",
	"python3-wheel":         "postinst: byte compiling (not done)",
	"python3.11":            "postinst: byte compiling (not done)",
	"python3.11-minimal":    "preinst: /var/lib/python marker; postinst: /usr/local/lib/python3.11/dist-packages (root's pip target: read-only anyway), binfmt, byte compiling (not done)",
	"python3.11-venv":       "postinst: byte compiling (not done)",
	"readline-common":       "postinst: /etc/inputrc from its default (done)",
	"tar":                   "postinst: rmt alternative (done)",
	"xz-utils":              "postinst: lzma alternatives (done)",
}

func TestMaintainerScriptsReviewed(t *testing.T) {
	r := needExecutorRoot(t)
	got := map[string]bool{}
	for _, p := range r.Packages {
		if slices.Contains(p.Scripts, "preinst") || slices.Contains(p.Scripts, "postinst") {
			got[p.Name] = true
		}
	}
	want := map[string]bool{}
	for name := range reviewedScripts {
		want[name] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packages with preinst or postinst (-reviewed +locked):\n%s", diff)
	}
	// Every alternative's target is in the root: a refresh that renames one shows here.
	entries := layerEntries(t, r)
	for _, a := range alternatives {
		for _, g := range append([]alternative{a}, a.slaves...) {
			if e, ok := entries[g.target]; !ok || e.Type == tar.TypeDir {
				t.Errorf("alternative %s: %s is not a file of the root", g.name, g.target)
			}
		}
	}
}

// TestExecutorRootIsReproducible: built again from the packages in reverse order, the same
// digest. (TestBuildIsReproducible proves that reading the .debs again reads the same.)
func TestExecutorRootIsReproducible(t *testing.T) {
	r := needExecutorRoot(t)
	debs, err := executorDebs()
	if err != nil {
		t.Fatal(err)
	}
	debs = slices.Clone(debs)
	slices.Reverse(debs)
	again, err := build(debs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d1, err := r.Layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := again.Layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("digest %s, then %s", d1, d2)
	}
	size, err := r.Layer.Size()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packages, layer %s, %.1f MB compressed", len(r.Packages), d1, float64(size)/1e6)
}

// TestCABundle: the bundle parses, and holds Mozilla's roots.
func TestCABundle(t *testing.T) {
	r := needExecutorRoot(t)
	bundle := []byte(layerEntries(t, r)[CABundle].Content)
	n := 0
	for rest := bundle; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Errorf("certificate %d: %v", n, err)
		}
		n++
	}
	// Mozilla's store holds about 140 roots; fewer than 100 is a broken bundle.
	if n < 100 {
		t.Errorf("%d certificates in %s", n, CABundle)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(bundle) {
		t.Errorf("crypto/x509 takes none of %s", CABundle)
	}
}

// TestExecutorRootRuns unpacks the root and runs, chrooted into it as the executor's user
// with the root read-only and tmpfs on /workspace and /tmp (as the executor Pod mounts
// them), what agents run.
func TestExecutorRootRuns(t *testing.T) {
	r := needExecutorRoot(t)
	if os.Geteuid() != 0 {
		precondition.Missing(t, "chroot needs root")
	}
	root := filepath.Join(t.TempDir(), "root")
	unpack(t, r, root)
	if out, err := inRoot(t, root, r.Env, "/usr/bin/true"); err != nil {
		precondition.Missing(t, "cannot run in a private mount namespace, chrooted (%v): %s", err, out)
	}
	// A TLS server nobody trusts: the clients fail to verify it, saying which CA file they
	// loaded.
	tlsServer := httptest.NewUnstartedServer(nil)
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes
	tlsServer.StartTLS()
	defer tlsServer.Close()
	for _, tc := range []struct {
		name string
		argv []string
		want []string // lines the output must hold
	}{
		{"bash", []string{"bash", "-c", "echo ok"}, []string{"ok"}},
		{"the user", []string{"id"}, []string{"uid=65532(nonroot) gid=65532(nonroot) groups=65532(nonroot)"}},
		{"sh is dash", []string{"readlink", "-f", "/bin/sh"}, []string{"/usr/bin/dash"}},
		{"python", []string{"python3", "-c", `import ssl, json, sqlite3, os
print(os.path.realpath(ssl.get_default_verify_paths().cafile))
print(ssl.create_default_context().cert_store_stats()["x509_ca"] >= 100)
print(sqlite3.connect(":memory:").execute("select 1").fetchone()[0], json.dumps({"a": 1}))`},
			[]string{CABundle, "True", `1 {"a": 1}`}},
		{"python is python3", []string{"python", "--version"}, []string{"Python 3.11.2"}},
		{"pip uses the bundle", []string{"python3", "-c", "from pip._vendor import certifi; print(certifi.where())"}, []string{CABundle}},
		{"git", []string{"sh", "-c", `git init -q /workspace/x && git -C /workspace/x -c user.name=a -c user.email=a@b commit -q --allow-empty -m m && git -C /workspace/x log --format=%s`}, []string{"m"}},
		// GnuTLS loads the directory of the bundle, which holds the bundle only.
		{"git over https loads the bundle", []string{"sh", "-c", "GIT_CURL_VERBOSE=1 git ls-remote " + tlsServer.URL + "/x.git 2>&1 | sed -n 's|.*found \\([0-9]*\\) certificates in /etc/ssl/certs$|\\1|p' | awk '{print ($1 >= 100)}'"}, []string{"1"}},
		{"curl loads the bundle", []string{"sh", "-c", "curl -sv " + tlsServer.URL + " 2>&1; true"}, []string{"*  CAfile: " + CABundle}},
		{"awk", []string{"sh", "-c", "echo a b | awk '{print $2}'; readlink -f /usr/bin/awk"}, []string{"b", "/usr/bin/mawk"}},
		{"which", []string{"which", "python3", "git", "bash"}, []string{"/usr/bin/python3", "/usr/bin/git", "/usr/bin/bash"}},
		{"HOME is writable", []string{"bash", "-c", `env | grep -E '^(HOME|LANG)='; echo x > ~/probe && readlink -f ~/probe`}, []string{"HOME=/home/user", "LANG=C.UTF-8", "/workspace/probe"}},
		{"the root is read-only", []string{"sh", "-c", "touch /etc/x 2>&1; true"}, []string{"touch: cannot touch '/etc/x': Read-only file system"}},
		{"no ld.so.cache needed", []string{"sh", "-c", "test -e /etc/ld.so.cache || echo none"}, []string{"none"}},
		// Offline: a wheel of the image's own. The root is read-only, so pip installs for
		// the user, into HOME; PIP_BREAK_SYSTEM_PACKAGES lets it past PEP 668.
		{"pip install", []string{"sh", "-c", "pip install -q --no-index --force-reinstall /usr/share/python-wheels/setuptools-*.whl 2>&1 && readlink -f ~/.local/lib/python3.11/site-packages/setuptools"}, []string{"/workspace/.local/lib/python3.11/site-packages/setuptools"}},
		{"venv and pip", []string{"sh", "-c", "python3 -m venv /workspace/venv && /workspace/venv/bin/pip --version | cut -d' ' -f1,2"}, []string{"pip 23.0.1"}},
		{"tools", []string{"sh", "-c", `set -e
printf 'a\nb\n' > /tmp/f; printf 'a\nc\n' > /tmp/g; diff /tmp/f /tmp/g | grep -c '^[<>]'
find /tmp -name f | sed s/f/F/; tar -C /tmp -czf /tmp/t.tgz f g && tar -tzf /tmp/t.tgz | wc -l
lzma -c /tmp/f | lzcat | head -1; gzip -k /tmp/g && zcat /tmp/g.gz | tail -1
ps -o comm= -p $$; less --version | head -1 | cut -d' ' -f1; readlink -f /usr/bin/pager`},
			[]string{"2", "/tmp/F", "2", "a", "c", "sh", "less", "/usr/bin/less"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := inRoot(t, root, r.Env, tc.argv...)
			if err != nil {
				t.Fatalf("%q: %v\n%s", tc.argv, err, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			for _, w := range tc.want {
				if !slices.Contains(lines, w) {
					t.Errorf("%q: no line %q in:\n%s", tc.argv, w, out)
				}
			}
		})
	}
}

// unpack extracts the layer into dir as a runtime would, owned by root.
func unpack(t *testing.T, r *Root, dir string) {
	t.Helper()
	rc, err := r.Layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.Mkdir(p, 0o700)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dir, h.Linkname), p)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				err = errors.Join(err, f.Close())
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeLink {
			// Chmod after writing: the modes include setgid and sticky bits.
			if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func modeBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// inRoot runs argv in root as chrootChild does, in a private mount namespace of its own
// (nothing it mounts outlives it), and returns its output.
func inRoot(t *testing.T, root string, env []string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, argv...)...)
	cmd.Env = append(slices.Clone(env), chrootEnv+"="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// chrootChild runs in the test binary started by inRoot, already in its own mount
// namespace: it mounts the root read-only with tmpfs on /workspace (the user's) and /tmp,
// proc on /proc and a /dev as runc makes one, chroots, becomes UID:GID and executes argv.
// It never returns.
func chrootChild(root string, argv []string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "chroot child:", err)
		os.Exit(126)
	}
	mount := func(source, target, fstype string, flags uintptr, data string) {
		if err := syscall.Mount(source, target, fstype, flags, data); err != nil {
			fail(fmt.Errorf("mount %s on %s: %w", source, target, err))
		}
	}
	mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, "")
	mount(root, root, "", syscall.MS_BIND|syscall.MS_REC, "")
	mount("", root, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, "")
	mount("tmpfs", root+Workspace, "tmpfs", 0, fmt.Sprintf("mode=0755,uid=%d,gid=%d", UID, GID))
	mount("tmpfs", root+"/tmp", "tmpfs", 0, "mode=1777")
	mount("proc", root+"/proc", "proc", 0, "")
	mount("tmpfs", root+"/dev", "tmpfs", 0, "mode=0755")
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := os.WriteFile(root+"/dev/"+d, nil, 0o666); err != nil {
			fail(err)
		}
		mount("/dev/"+d, root+"/dev/"+d, "", syscall.MS_BIND, "")
	}
	for link, to := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, root+"/dev/"+link); err != nil {
			fail(err)
		}
	}
	if err := syscall.Chroot(root); err != nil {
		fail(err)
	}
	if err := os.Chdir(Workspace); err != nil {
		fail(err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		fail(err)
	}
	if err := syscall.Setgid(GID); err != nil {
		fail(err)
	}
	if err := syscall.Setuid(UID); err != nil {
		fail(err)
	}
	// The environment is the image's (inRoot's), and LookPath searches its PATH.
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, chrootEnv+"=") })
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		fail(err)
	}
	fail(syscall.Exec(bin, argv, env))
}
