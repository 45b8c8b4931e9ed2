package debroot

import (
	"archive/tar"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// layerEntry is one tar entry of a layer as the tests compare it.
type layerEntry struct {
	Type     byte
	Mode     int64
	UID, GID int
	Link     string
	Content  string
	ModTime  int64
}

func layerEntries(t *testing.T, r *Root) map[string]layerEntry {
	t.Helper()
	rc, err := r.Layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]layerEntry{}
	var order []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(h.Name, "/")
		out[name] = layerEntry{Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, Link: h.Linkname, Content: string(content), ModTime: h.ModTime.Unix()}
		order = append(order, name)
	}
	if !slices.IsSorted(order) {
		t.Errorf("entries are not sorted")
	}
	return out
}

// base is a package like bookworm's: files under /bin and /lib64 (moved into /usr), mawk
// and its alternative, certificates.
var base = []pkg{
	{name: "libc6", files: []fx{dirx("./lib/"), dirx("./lib64/"), dirx("./lib/x86_64-linux-gnu/"), reg("./lib/x86_64-linux-gnu/libc.so.6", "libc"), sym("./lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")}},
	{name: "gzip", files: []fx{dirx("./bin/"), exe("./bin/gunzip", "gunzip"), hardlink("./bin/uncompress", "./bin/gunzip"), dirx("./usr/share/doc/gzip/"), reg("./usr/share/doc/gzip/copyright", "GPL"), reg("./usr/share/doc/gzip/NEWS.gz", "news"), reg("./usr/share/man/man1/gzip.1.gz", "man")}},
	{name: "mawk", files: []fx{dirx("./usr/bin/"), exe("./usr/bin/mawk", "mawk")}},
	{name: "ca-certificates", arch: "all", files: []fx{reg("./usr/share/ca-certificates/mozilla/B.crt", "B\n"), reg("./usr/share/ca-certificates/mozilla/A.crt", "A")}},
	{name: "base-files", files: []fx{reg("./usr/share/base-files/profile", "profile"), dirx("./tmp/"), dirx("./var/run/")}},
}

func TestBuild(t *testing.T) {
	r, err := Build(writeDebs(t, base...), Options{Epoch: time.Unix(1700000000, 500)})
	if err != nil {
		t.Fatal(err)
	}
	got := layerEntries(t, r)
	want := map[string]layerEntry{
		// merged /usr: shipped under /bin and /lib64, found in /usr.
		"/bin":                            {Type: tar.TypeSymlink, Mode: 0o777, Link: "usr/bin"},
		"/lib64":                          {Type: tar.TypeSymlink, Mode: 0o777, Link: "usr/lib64"},
		"/usr/lib32":                      {Type: tar.TypeDir, Mode: 0o755},
		"/usr/bin/gunzip":                 {Type: tar.TypeReg, Mode: 0o755, Content: "gunzip"},
		"/usr/bin/uncompress":             {Type: tar.TypeLink, Mode: 0o755, Link: "usr/bin/gunzip"},
		"/usr/lib64/ld-linux-x86-64.so.2": {Type: tar.TypeSymlink, Mode: 0o777, Link: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		// alternatives: awk and nawk through /etc/alternatives; none for absent packages.
		"/usr/bin/awk":          {Type: tar.TypeSymlink, Mode: 0o777, Link: "/etc/alternatives/awk"},
		"/etc/alternatives/awk": {Type: tar.TypeSymlink, Mode: 0o777, Link: "/usr/bin/mawk"},
		"/usr/bin/nawk":         {Type: tar.TypeSymlink, Mode: 0o777, Link: "/etc/alternatives/nawk"},
		// the CA bundle: sorted, each certificate ending in a newline.
		CABundle: {Type: tar.TypeReg, Mode: 0o644, Content: "A\nB\n"},
		// documentation out, copyright in.
		"/usr/share/doc/gzip/copyright": {Type: tar.TypeReg, Mode: 0o644, Content: "GPL"},
		// installed from base-files' defaults.
		"/etc/profile": {Type: tar.TypeReg, Mode: 0o644, Content: "profile"},
		// the user and the home.
		"/etc/passwd": {Type: tar.TypeReg, Mode: 0o644, Content: "root:x:0:0:root:/root:/bin/bash\nnonroot:x:65532:65532:nonroot:/home/user:/bin/bash\n"},
		"/home/user":  {Type: tar.TypeSymlink, Mode: 0o777, Link: "/workspace"},
		"/workspace":  {Type: tar.TypeDir, Mode: 0o755},
		"/tmp":        {Type: tar.TypeDir, Mode: 0o1777},
		"/var/run":    {Type: tar.TypeSymlink, Mode: 0o777, Link: "/run"},
	}
	for p, w := range want {
		w.ModTime = 1700000000
		if diff := cmp.Diff(w, got[p]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p, diff)
		}
	}
	for _, p := range []string{"/usr/share/doc/gzip/NEWS.gz", "/usr/share/man/man1/gzip.1.gz", "/usr/bin/which", "/etc/alternatives/which"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is in the layer", p)
		}
	}
	for p, e := range got {
		if e.UID != 0 || e.GID != 0 || e.ModTime != 1700000000 {
			t.Errorf("%s: owner %d:%d, time %d", p, e.UID, e.GID, e.ModTime)
		}
		if strings.HasPrefix(p, "/bin/") || strings.HasPrefix(p, "/lib64/") {
			t.Errorf("%s: written beneath a merged directory", p)
		}
	}
	if diff := cmp.Diff([]string{"base-files", "ca-certificates", "gzip", "libc6", "mawk"}, names(r.Packages)); diff != "" {
		t.Errorf("packages (-want +got):\n%s", diff)
	}
	if !slices.Contains(r.Env, "HOME=/home/user") {
		t.Errorf("env %q", r.Env)
	}
}

func names(pkgs []Package) []string {
	var out []string
	for _, p := range pkgs {
		out = append(out, p.Name)
	}
	return out
}

// TestBuildIsReproducible: the same packages in any order give the same digest; another
// epoch gives another.
func TestBuildIsReproducible(t *testing.T) {
	debs := writeDebs(t, base...)
	digest := func(debs []string, o Options) string {
		t.Helper()
		r, err := Build(debs, o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := r.Layer.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	first := digest(debs, Options{})
	reversed := slices.Clone(debs)
	slices.Reverse(reversed)
	if again := digest(reversed, Options{}); again != first {
		t.Errorf("digest %s, then %s in reverse order", first, again)
	}
	if other := digest(debs, Options{Epoch: time.Unix(1, 0)}); other == first {
		t.Errorf("another epoch, the same digest %s", other)
	}
}

// TestBuildRefuses: one case per class of package set Build refuses.
func TestBuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkgs []pkg
		want string
	}{
		{"two packages, one path, different files", []pkg{{name: "a", files: []fx{reg("./etc/x", "a")}}, {name: "b", files: []fx{reg("./etc/x", "b")}}}, "shipped differently by a and b"},
		{"the same path under /bin and /usr/bin", []pkg{{name: "a", files: []fx{exe("./bin/x", "a")}}, {name: "b", files: []fx{exe("./usr/bin/x", "b")}}}, "/usr/bin/x: shipped differently"},
		{"a relative link a move would repoint", []pkg{{name: "a", files: []fx{sym("./bin/x", "../usr/bin/y")}}}, "moved to /usr/bin/x"},
		{"a file and a directory", []pkg{{name: "a", files: []fx{reg("./etc/x", "a")}}, {name: "b", files: []fx{dirx("./etc/x/")}}}, "shipped differently"},
		{"beneath a link", []pkg{{name: "a", files: []fx{sym("./etc/d", "/tmp")}}, {name: "b", files: []fx{reg("./etc/d/x", "b")}}}, "not a directory"},
		{"a hard link to a document", []pkg{{name: "a", files: []fx{reg("./usr/share/doc/a/README", "r"), hardlink("./usr/bin/r", "./usr/share/doc/a/README")}}}, "hard link"},
		{"two architectures", []pkg{{name: "a", arch: "amd64"}, {name: "b", arch: "arm64"}}, "one architecture"},
		{"an unknown architecture", []pkg{{name: "a", arch: "s390x"}}, "no merged-/usr layout"},
		{"a package twice", []pkg{{name: "a"}, {name: "a", version: "2"}}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var debs []string
			for i, p := range tc.pkgs {
				// Distinct files even for one package name.
				debs = append(debs, writeDebsIn(t, dir, i, p))
			}
			_, err := Build(debs, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestKeep(t *testing.T) {
	for p, want := range map[string]bool{
		"/usr/bin/git":                      true,
		"/usr/share/doc/git":                true,
		"/usr/share/doc/git/copyright":      true,
		"/usr/share/doc/git/README.md":      false,
		"/usr/share/doc/git/contrib/x":      false,
		"/usr/share/man/man1/git.1.gz":      false,
		"/usr/share/locale/de/LC_MESSAGES":  false,
		"/usr/share/git-core/templates/x":   true,
		"/usr/share/documentation":          true,
		"/usr/share/lintian/overrides/bash": false,
	} {
		if got := keep(p); got != want {
			t.Errorf("keep(%s) = %v, want %v", p, got, want)
		}
	}
}
