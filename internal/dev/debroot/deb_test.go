package debroot

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadDeb(t *testing.T) {
	files := []fx{dirx("./usr/"), dirx("./usr/bin/"), exe("./usr/bin/tool", "#!/bin/sh\n"), sym("./usr/bin/alias", "tool"), hardlink("./usr/bin/again", "./usr/bin/tool")}
	want := []entry{
		{path: "/usr", typ: tar.TypeDir, mode: 0o755},
		{path: "/usr/bin", typ: tar.TypeDir, mode: 0o755},
		{path: "/usr/bin/tool", typ: tar.TypeReg, mode: 0o755, content: []byte("#!/bin/sh\n")},
		{path: "/usr/bin/alias", typ: tar.TypeSymlink, mode: 0o777, link: "tool"},
		{path: "/usr/bin/again", typ: tar.TypeLink, mode: 0o755, link: "/usr/bin/tool"},
	}
	for _, ext := range []string{".xz", ".gz", ""} {
		t.Run("data.tar"+ext, func(t *testing.T) {
			d, err := readDeb(bytes.NewReader(debOf(t, pkg{name: "tool", version: "1:2.0-1", scripts: []string{"postinst", "preinst"}, files: files, ext: ext})))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, d.files, cmp.AllowUnexported(entry{})); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			got := d.pkg
			got.Control = nil
			if diff := cmp.Diff(Package{Name: "tool", Version: "1:2.0-1", Architecture: "amd64", Scripts: []string{"postinst", "preinst"}}, got); diff != "" {
				t.Errorf("package (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadDebRefuses: one case per class of broken or hostile archive.
func TestReadDebRefuses(t *testing.T) {
	good := debOf(t, pkg{name: "p", files: []fx{reg("./etc/x", "x")}})
	control := compress(t, ".gz", tarOf(t, []fx{reg("./control", "Package: p\nVersion: 1\nArchitecture: all\n")}))
	data := func(files ...fx) member { return member{"data.tar.gz", compress(t, ".gz", tarOf(t, files))} }
	for _, tc := range []struct {
		name string
		deb  []byte
		want string
	}{
		{"not an ar archive", []byte("PK\x03\x04"), "not an ar archive"},
		{"truncated header", good[:len(arMagic)+30], "ar header"},
		{"truncated member", good[:len(good)-40], ""},
		{"bad terminator", []byte(arMagic + strings.Repeat(" ", 60)), "bad terminator"},
		{"no data", arOf(member{"debian-binary", []byte("2.0\n")}, member{"control.tar.gz", control}), "no control or no data"},
		{"two data members", arOf(member{"control.tar.gz", control}, data(reg("./a", "a")), data(reg("./b", "b"))), "two data"},
		{"format 3", arOf(member{"debian-binary", []byte("3.0\n")}), "not format 2"},
		{"zstd", arOf(member{"control.tar.gz", control}, member{"data.tar.zst", []byte("x")}), "unsupported compression"},
		{"climbs out", arOf(member{"control.tar.gz", control}, data(reg("./../etc/passwd", "x"))), "climbs out"},
		{"hard link climbs out", arOf(member{"control.tar.gz", control}, data(hardlink("./a", "../../etc/shadow"))), "climbs out"},
		{"device", arOf(member{"control.tar.gz", control}, data(fx{name: "./dev/null", typ: tar.TypeChar, mode: 0o666})), "unsupported type"},
		{"empty link", arOf(member{"control.tar.gz", control}, data(sym("./a", ""))), "empty link"},
		{"no package name", arOf(member{"control.tar.gz", compress(t, ".gz", tarOf(t, []fx{reg("./control", "Version: 1\n")}))}, data()), "no Package"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readDeb(bytes.NewReader(tc.deb))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("readDeb = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzReadDeb: any input is refused or read, never a panic, and what is read is clean.
func FuzzReadDeb(f *testing.F) {
	f.Add(debOf(f, pkg{name: "p", scripts: []string{"postinst"}, files: []fx{dirx("./bin/"), exe("./bin/a", "a"), sym("./bin/b", "a"), hardlink("./bin/c", "./bin/a")}}))
	f.Add(debOf(f, pkg{name: "p", ext: ".gz", files: []fx{reg("./etc/x", "x")}}))
	f.Add(debOf(f, pkg{name: "p", ext: "", files: []fx{reg("./etc/x", "x")}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := readDeb(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, e := range d.files {
			if p, err := cleanPath(e.path); err != nil || p != e.path || e.path == "/" {
				t.Fatalf("unclean path %q", e.path)
			}
		}
	})
}
