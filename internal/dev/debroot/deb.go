package debroot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/ulikunitz/xz"
)

// Bounds on what a .deb may hold: the reader refuses more rather than allocating it, so a
// damaged or hostile archive fails instead of exhausting memory.
const (
	// maxFileBytes bounds one file of a package: the largest in the image (git's binary,
	// libpython's stdlib pieces) is a few MB; a GiB is a broken archive.
	maxFileBytes = 1 << 30
	// maxControlBytes bounds a member of control.tar (control, md5sums, scripts): kilobytes
	// in practice.
	maxControlBytes = 16 << 20
	// maxEntries bounds the files of one package (python's stdlib, the largest here, has
	// about 1,500).
	maxEntries = 1 << 20
	// maxPackageBytes bounds a package's files together: the largest here unpacks to 45 MB.
	maxPackageBytes = 4 << 30
)

// Package is what a .deb says of itself (its control file).
type Package struct {
	Name, Version, Architecture string
	// Scripts names the maintainer scripts it carries (preinst, postinst, prerm, postrm),
	// none of which Build runs.
	Scripts []string
	// Control is the control file as shipped (for /var/lib/dpkg/status.d).
	Control []byte
}

// entry is one file of a package's data.tar, with its path made absolute and clean.
type entry struct {
	path    string
	typ     byte   // tar.TypeDir, tar.TypeReg, tar.TypeSymlink or tar.TypeLink
	mode    int64  // permission, setuid, setgid and sticky bits
	content []byte // tar.TypeReg
	link    string // tar.TypeSymlink: the target as shipped; tar.TypeLink: the clean absolute path linked to
}

// deb is one unpacked package.
type deb struct {
	pkg   Package
	files []entry
}

// arMagic opens every ar archive (a .deb is one: debian-binary, control.tar.*, data.tar.*).
const arMagic = "!<arch>\n"

// readDeb unpacks a .deb.
func readDeb(r io.Reader) (*deb, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != arMagic {
		return nil, errors.New("not an ar archive")
	}
	var d deb
	var seenControl, seenData bool
	for {
		name, size, err := arHeader(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		body := io.LimitReader(br, size)
		switch {
		case name == "debian-binary":
			v, err := io.ReadAll(body)
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(string(v), "2.") {
				return nil, fmt.Errorf("debian-binary %q: not format 2", v)
			}
		case strings.HasPrefix(name, "control.tar"):
			if seenControl {
				return nil, errors.New("two control members")
			}
			seenControl = true
			if d.pkg, err = readControl(name, body); err != nil {
				return nil, err
			}
		case strings.HasPrefix(name, "data.tar"):
			if seenData {
				return nil, errors.New("two data members")
			}
			seenData = true
			if d.files, err = readData(name, body); err != nil {
				return nil, err
			}
		}
		// The rest of the member, and the padding byte that keeps members at even offsets.
		if _, err := io.Copy(io.Discard, body); err != nil {
			return nil, err
		}
		if size%2 == 1 {
			if _, err := br.ReadByte(); err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
		}
	}
	if !seenControl || !seenData {
		return nil, errors.New("no control or no data member")
	}
	return &d, nil
}

// arHeader reads one 60-byte member header: name, mtime, uid, gid, mode, size, "`\n".
func arHeader(br *bufio.Reader) (string, int64, error) {
	var h [60]byte
	n, err := io.ReadFull(br, h[:])
	if n == 0 && errors.Is(err, io.EOF) {
		return "", 0, io.EOF
	}
	if err != nil {
		return "", 0, fmt.Errorf("ar header: %w", io.ErrUnexpectedEOF)
	}
	if string(h[58:60]) != "`\n" {
		return "", 0, errors.New("ar header: bad terminator")
	}
	// GNU ar ends names with '/'; dpkg pads with spaces.
	name := strings.TrimRight(strings.TrimRight(string(h[0:16]), " "), "/")
	size, err := strconv.ParseInt(strings.TrimRight(string(h[48:58]), " "), 10, 64)
	if err != nil || size < 0 {
		return "", 0, fmt.Errorf("ar member %q: bad size", name)
	}
	return name, size, nil
}

// decompress opens a member by its name's suffix: what dpkg-deb writes (xz by default,
// gzip, or none). zstd (Ubuntu's) is not Debian's and is refused.
func decompress(name string, r io.Reader) (io.Reader, error) {
	switch path.Ext(name) {
	case ".tar":
		return r, nil
	case ".gz":
		return gzip.NewReader(r)
	case ".xz":
		return xz.NewReader(r)
	default:
		return nil, fmt.Errorf("member %s: unsupported compression", name)
	}
}

// maintainerScripts are the scripts dpkg would run (config and templates are debconf's).
var maintainerScripts = []string{"preinst", "postinst", "prerm", "postrm"}

func readControl(name string, r io.Reader) (Package, error) {
	var p Package
	dr, err := decompress(name, r)
	if err != nil {
		return p, err
	}
	tr := tar.NewReader(dr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
		base := path.Base(path.Clean(h.Name))
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if slices.Contains(maintainerScripts, base) {
			p.Scripts = append(p.Scripts, base)
		}
		if base != "control" {
			continue
		}
		if h.Size > maxControlBytes {
			return p, fmt.Errorf("%s: control is %d bytes", name, h.Size)
		}
		if p.Control, err = io.ReadAll(io.LimitReader(tr, maxControlBytes)); err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
	}
	slices.Sort(p.Scripts)
	fields := controlFields(p.Control)
	p.Name, p.Version, p.Architecture = fields["Package"], fields["Version"], fields["Architecture"]
	if p.Name == "" || p.Version == "" || p.Architecture == "" {
		return p, errors.New("control: no Package, Version or Architecture")
	}
	return p, nil
}

// controlFields parses the single-line fields of a control paragraph.
func controlFields(control []byte) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(string(control)) {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue // a continuation
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func readData(name string, r io.Reader) ([]entry, error) {
	dr, err := decompress(name, r)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(dr)
	var files []entry
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(files) == maxEntries {
			return nil, fmt.Errorf("%s: more than %d entries", name, maxEntries)
		}
		p, err := cleanPath(h.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if p == "/" {
			continue
		}
		e := entry{path: p, typ: h.Typeflag, mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg: // the reader reports the old '\x00' type as TypeReg
			if total += h.Size; h.Size > maxFileBytes || total > maxPackageBytes {
				return nil, fmt.Errorf("%s: %s is %d bytes", name, p, h.Size)
			}
			var buf bytes.Buffer
			buf.Grow(int(min(h.Size, maxControlBytes))) // the size is a claim: grow as data comes
			if _, err := io.Copy(&buf, io.LimitReader(tr, maxFileBytes)); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, p, err)
			}
			e.content = buf.Bytes()
		case tar.TypeSymlink:
			if h.Linkname == "" {
				return nil, fmt.Errorf("%s: %s: empty link", name, p)
			}
			e.link = h.Linkname
		case tar.TypeLink:
			if e.link, err = cleanPath(h.Linkname); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, p, err)
			}
		default:
			return nil, fmt.Errorf("%s: %s: unsupported type %q", name, p, h.Typeflag)
		}
		files = append(files, e)
	}
}

// cleanPath makes a data.tar name ("./usr/bin/bash") absolute and clean, refusing one that
// climbs out of the root.
func cleanPath(name string) (string, error) {
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("path %q climbs out", name)
	}
	return path.Clean("/" + name), nil
}
