package debroot

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"strings"
)

// node is one path of the root being built. Hard links share a node's content and inode.
type node struct {
	typ     byte // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode    int64
	content []byte
	link    string
	inode   int    // regular files: equal for the paths of one hard-linked file
	origin  string // the package that shipped it, or "debroot" for what Build adds
}

// tree is the root being built: clean absolute paths to what is there.
type tree struct {
	nodes  map[string]*node
	inodes int
	// merged maps each directory of the root merged into /usr to its place there ("/bin" →
	// "/usr/bin"), as debootstrap's merged-/usr layout has it.
	merged map[string]string
}

func newTree(mergedDirs []string) *tree {
	t := &tree{nodes: map[string]*node{}, merged: map[string]string{}}
	for _, d := range mergedDirs {
		t.merged["/"+d] = "/usr/" + d
	}
	return t
}

// relocate is where a path lands in a merged-/usr root: /bin/bash is /usr/bin/bash, as
// dpkg unpacking through debootstrap's /bin → usr/bin link puts it.
func (t *tree) relocate(p string) string {
	top, rest, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if to, ok := t.merged["/"+top]; ok {
		return path.Join(to, rest)
	}
	return p
}

// addPackage merges one package's files, relocated into /usr where the root merges them,
// leaving out those keep refuses.
func (t *tree) addPackage(d *deb, keep func(string) bool) error {
	name := d.pkg.Name
	for _, e := range d.files {
		p := t.relocate(e.path)
		if !keep(p) {
			continue
		}
		n := &node{typ: e.typ, mode: e.mode, content: e.content, link: e.link, origin: name}
		switch e.typ {
		case tar.TypeLink:
			// The target precedes the link in the archive; it may have been left out (a
			// document), then the link is a copy of nothing: refuse, it is never the case
			// in Debian's archive.
			target, ok := t.nodes[t.relocate(e.link)]
			if !ok || target.typ != tar.TypeReg {
				return fmt.Errorf("%s: %s: hard link to %s, which is not a file of the root", name, e.path, e.link)
			}
			n = &node{typ: tar.TypeReg, mode: e.mode, content: target.content, inode: target.inode, origin: name}
		case tar.TypeReg:
			t.inodes++
			n.inode = t.inodes
		case tar.TypeSymlink:
			if err := t.checkRelocatedLink(e.path, p, e.link); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := t.put(p, n); err != nil {
			return err
		}
	}
	return nil
}

// checkRelocatedLink refuses a relative link that means something else once moved into
// /usr: dpkg would have written it as shipped, and it would dangle or point elsewhere.
func (t *tree) checkRelocatedLink(from, to, target string) error {
	if from == to || path.IsAbs(target) {
		return nil
	}
	before := t.relocate(path.Join(path.Dir(from), target))
	after := t.relocate(path.Join(path.Dir(to), target))
	if before != after {
		return fmt.Errorf("%s → %s: moved to %s it would point at %s, not %s", from, target, to, after, before)
	}
	return nil
}

// put adds n at p. Directories merge (the first's mode stays, as dpkg leaves an existing
// directory alone); anything else twice must be the same thing twice (dpkg would refuse two
// packages shipping different files at one path, short of a Replaces this layout does not
// model).
func (t *tree) put(p string, n *node) error {
	old, ok := t.nodes[p]
	if !ok {
		t.nodes[p] = n
		return nil
	}
	if old.typ == tar.TypeDir && n.typ == tar.TypeDir {
		return nil
	}
	if old.typ == n.typ && old.mode == n.mode && old.link == n.link && bytes.Equal(old.content, n.content) {
		return nil
	}
	return fmt.Errorf("%s: shipped differently by %s and %s", p, old.origin, n.origin)
}

// set adds or replaces what Build itself puts at p (the effects of maintainer scripts).
func (t *tree) set(p string, n node) {
	n.origin = "debroot"
	if n.typ == tar.TypeReg {
		t.inodes++
		n.inode = t.inodes
	}
	t.nodes[p] = &n
}

// file, dir and symlink are the nodes Build adds.
func file(mode int64, content []byte) node {
	return node{typ: tar.TypeReg, mode: mode, content: content}
}
func dir(mode int64) node        { return node{typ: tar.TypeDir, mode: mode} }
func symlink(target string) node { return node{typ: tar.TypeSymlink, mode: 0o777, link: target} }

// exists reports whether p is in the root as a file or a link (update-alternatives' test
// of a target).
func (t *tree) exists(p string) bool {
	n, ok := t.nodes[p]
	return ok && n.typ != tar.TypeDir
}

// complete adds every missing parent directory (0755) and checks that no path lies beneath
// a symlink: a layer must not write through a link.
func (t *tree) complete() error {
	for p := range t.nodes {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			n, ok := t.nodes[d]
			switch {
			case !ok:
				t.nodes[d] = &node{typ: tar.TypeDir, mode: 0o755, origin: "debroot"}
			case n.typ != tar.TypeDir:
				return fmt.Errorf("%s (from %s) lies beneath %s, which is not a directory (from %s)", p, t.nodes[p].origin, d, n.origin)
			}
		}
	}
	return nil
}
