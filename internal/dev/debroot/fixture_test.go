package debroot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ulikunitz/xz"
)

// fx is a file of a test package: a tar header (Name, Typeflag, Mode, Linkname) and content.
type fx struct {
	name    string
	typ     byte
	mode    int64
	link    string
	content string
}

func reg(name, content string) fx {
	return fx{name: name, typ: tar.TypeReg, mode: 0o644, content: content}
}
func exe(name, content string) fx {
	return fx{name: name, typ: tar.TypeReg, mode: 0o755, content: content}
}
func dirx(name string) fx { return fx{name: name, typ: tar.TypeDir, mode: 0o755} }
func sym(name, target string) fx {
	return fx{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target}
}
func hardlink(name, target string) fx {
	return fx{name: name, typ: tar.TypeLink, mode: 0o755, link: target}
}

// tarOf writes files as a tar (dpkg-deb's names: "./usr/bin/x").
func tarOf(t testing.TB, files []fx) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: f.mode, Linkname: f.link, Size: int64(len(f.content))}
		if f.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.content)); f.typ == tar.TypeReg && err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compress compresses data as a member named by ext (".xz", ".gz", "").
func compress(t testing.TB, ext string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch ext {
	case "":
		return data
	case ".gz":
		w := gzip.NewWriter(&buf)
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case ".xz":
		w, err := xz.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("compression %q", ext)
	}
	return buf.Bytes()
}

// member is one member of an ar archive.
type member struct {
	name string
	data []byte
}

// arOf writes an ar archive as dpkg-deb does.
func arOf(members ...member) []byte {
	var buf bytes.Buffer
	buf.WriteString(arMagic)
	for _, m := range members {
		fmt.Fprintf(&buf, "%-16s%-12d%-6d%-6d%-8o%-10d`\n", m.name, 0, 0, 0, 0o100644, len(m.data))
		buf.Write(m.data)
		if len(m.data)%2 == 1 {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()
}

// pkg describes a test package.
type pkg struct {
	name, version, arch string
	scripts             []string
	files               []fx
	ext                 string // data.tar's compression; ".xz" when empty
}

// debOf builds the .deb of p.
func debOf(t testing.TB, p pkg) []byte {
	t.Helper()
	if p.version == "" {
		p.version = "1.0-1"
	}
	if p.arch == "" {
		p.arch = "amd64"
	}
	ext := p.ext
	if ext == "" {
		ext = ".xz"
	}
	control := []fx{dirx("./"), reg("./control", fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: %s\nDescription: test\n a test package\n", p.name, p.version, p.arch))}
	for _, s := range p.scripts {
		control = append(control, exe("./"+s, "#!/bin/sh\n"))
	}
	return arOf(
		member{"debian-binary", []byte("2.0\n")},
		member{"control.tar.gz", compress(t, ".gz", tarOf(t, control))},
		member{"data.tar" + ext, compress(t, ext, tarOf(t, append([]fx{dirx("./")}, p.files...)))},
	)
}

// writeDebs writes the packages' .debs into a directory and returns their paths.
func writeDebs(t testing.TB, pkgs ...pkg) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, p := range pkgs {
		paths = append(paths, writeDebsIn(t, dir, i, p))
	}
	return paths
}

// writeDebsIn writes p's .deb into dir, named by i, and returns its path.
func writeDebsIn(t testing.TB, dir string, i int, p pkg) string {
	t.Helper()
	f := filepath.Join(dir, fmt.Sprintf("%d-%s.deb", i, p.name))
	if err := os.WriteFile(f, debOf(t, p), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}
