package debroot

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"
)

// mergedDirs are the root directories debootstrap links into /usr for a merged-/usr root
// (its setup_merged_usr: bin, sbin and lib, and the architecture's other library
// directories). Bookworm's packages still ship /bin/bash, /lib64/ld-linux-x86-64.so.2 …;
// unpacked through those links they land in /usr.
var mergedDirs = map[string][]string{
	"amd64": {"bin", "sbin", "lib", "lib32", "lib64", "libx32"},
	"arm64": {"bin", "sbin", "lib"},
}

// alternative is one link group update-alternatives would install from a postinst: link →
// /etc/alternatives/name → target, and its slaves likewise. A slave whose target is not in
// the root (a manual page) is left out, as update-alternatives does.
type alternative struct {
	name, link, target string
	slaves             []alternative
}

// alternatives are the groups the image's packages' postinsts install, each the highest
// priority (the only candidate) of its group. Documentation slaves are omitted: the root
// carries no manual pages.
var alternatives = []alternative{
	// mawk: update-alternatives --install /usr/bin/awk awk /usr/bin/mawk 5 --slave /usr/bin/nawk …
	{name: "awk", link: "/usr/bin/awk", target: "/usr/bin/mawk", slaves: []alternative{
		{name: "nawk", link: "/usr/bin/nawk", target: "/usr/bin/mawk"},
	}},
	// debianutils (5.6 on): which is an alternative, which.debianutils its only provider.
	{name: "which", link: "/usr/bin/which", target: "/usr/bin/which.debianutils"},
	// less: the pager Debian's git runs ("pager", not "less").
	{name: "pager", link: "/usr/bin/pager", target: "/usr/bin/less"},
	// xz-utils: lzma and the lz* compatibility commands.
	{name: "lzma", link: "/usr/bin/lzma", target: "/usr/bin/xz", slaves: lzmaSlaves()},
	// tar: the remote tape server (/etc/rmt links to it).
	{name: "rmt", link: "/usr/sbin/rmt", target: "/usr/sbin/rmt-tar"},
}

func lzmaSlaves() []alternative {
	out := []alternative{{name: "unlzma", link: "/usr/bin/unlzma", target: "/usr/bin/unxz"}}
	for _, util := range []string{"cat", "more", "less", "diff", "cmp", "grep", "egrep", "fgrep"} {
		out = append(out, alternative{name: "lz" + util, link: "/usr/bin/lz" + util, target: "/usr/bin/xz" + util})
	}
	return out
}

// Identities and places of the root.
const (
	// UID and GID are the executor's non-root identity (the executor Pod's
	// runAsUser/runAsGroup).
	UID, GID = 65532, 65532
	// UserName names UID in /etc/passwd and GID in /etc/group, as the busybox image does.
	UserName = "nonroot"
	// Workspace is the workspace claim's mount point and the working directory.
	Workspace = "/workspace"
	// Home is the user's HOME: a link to Workspace, so that what a program keeps in HOME
	// (~/.cache, ~/.local, ~/.gitconfig) is writable under a read-only root and kept with
	// the workspace — and /home/user is where E2B-style clients expect the user's files.
	Home = "/home/user"
)

// Env is the image's environment.
var Env = []string{
	// Debian's default PATH, after the user's own ~/.local/bin (where pip installs
	// commands).
	"PATH=" + Home + "/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=" + Home,
	// glibc's built-in UTF-8 locale (the image carries no locales).
	"LANG=C.UTF-8",
	// Bookworm's Python refuses `pip install` outside a venv (PEP 668). Under a read-only
	// root pip then installs for the user, into HOME, which is the workspace: no file of
	// the system's can be touched.
	"PIP_BREAK_SYSTEM_PACKAGES=1",
}

// setup does, explicitly, what the packages' maintainer scripts (and debootstrap, and
// base-passwd, libc-bin and netbase's scripts) would have done that matters when the root
// runs as a container. docs/development.md lists what is and is not reproduced.
func (t *tree) setup(arch string, pkgs []Package) error {
	// Merged /usr: /bin → usr/bin …, each with its directory in /usr.
	for _, d := range mergedDirs[arch] {
		if _, ok := t.nodes["/usr/"+d]; !ok {
			t.set("/usr/"+d, dir(0o755))
		}
		t.set("/"+d, symlink("usr/"+d))
	}
	for _, a := range alternatives {
		if !t.exists(a.target) {
			continue // its package is not in the root
		}
		for _, g := range append([]alternative{a}, a.slaves...) {
			if !t.exists(g.target) {
				continue
			}
			t.set("/etc/alternatives/"+g.name, symlink(g.target))
			t.set(g.link, symlink("/etc/alternatives/"+g.name))
		}
	}
	if err := t.caBundle(); err != nil {
		return err
	}
	// base-passwd's job: the users. Only root and the executor's user.
	t.set("/etc/passwd", file(0o644, fmt.Appendf(nil,
		"root:x:0:0:root:/root:/bin/bash\n%s:x:%d:%d:%s:%s:/bin/bash\n", UserName, UID, GID, UserName, Home)))
	t.set("/etc/group", file(0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", UserName, GID)))
	// libc-bin's postinst installs nsswitch.conf (libc-bin is not in the image): without
	// one glibc asks DNS before /etc/hosts.
	t.set("/etc/nsswitch.conf", file(0o644, []byte(nsswitch)))
	// netbase's postinst (a Pod's runtime mounts its own over it).
	t.set("/etc/hosts", file(0o644, []byte(hosts)))
	// base-files' and readline-common's postinsts install these from their defaults.
	for from, to := range map[string]string{
		"/usr/share/base-files/profile":     "/etc/profile",
		"/usr/share/base-files/dot.profile": "/root/.profile",
		"/usr/share/base-files/dot.bashrc":  "/root/.bashrc",
		"/usr/share/readline/inputrc":       "/etc/inputrc",
	} {
		if n, ok := t.nodes[from]; ok && n.typ == tar.TypeReg {
			t.set(to, file(0o644, n.content))
		}
	}
	// base-files' postinst: /run/lock, and /var/run and /var/lock as links into /run.
	t.set("/run/lock", dir(0o1777))
	t.set("/var/run", symlink("/run"))
	t.set("/var/lock", symlink("/run/lock"))
	// The mount points of the executor Pod and the user's home.
	t.set(Workspace, dir(0o755))
	t.set("/tmp", dir(0o1777))
	t.set("/home", dir(0o755))
	t.set(Home, symlink(Workspace))
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		t.set(d, dir(0o755))
	}
	t.dpkgStatus(pkgs)
	return nil
}

// caBundle writes /etc/ssl/certs/ca-certificates.crt as update-ca-certificates does on a
// fresh install (every certificate enabled): the certificates under
// /usr/share/ca-certificates in sorted order, each ending in a newline. OpenSSL (curl,
// Python through /usr/lib/ssl/cert.pem), GnuTLS (git's libcurl) and Go read this file. The
// per-certificate links and the hash links of /etc/ssl/certs are not made: only a program
// that looks certificates up by directory alone needs them.
func (t *tree) caBundle() error {
	const dir = "/usr/share/ca-certificates/"
	var certs []string
	for p, n := range t.nodes {
		if strings.HasPrefix(p, dir) && strings.HasSuffix(p, ".crt") && n.typ == tar.TypeReg {
			certs = append(certs, p)
		}
	}
	if len(certs) == 0 {
		return nil // ca-certificates is not in the root
	}
	slices.Sort(certs)
	var bundle bytes.Buffer
	for _, p := range certs {
		c := t.nodes[p].content
		bundle.Write(c)
		if len(c) > 0 && c[len(c)-1] != '\n' {
			bundle.WriteByte('\n')
		}
	}
	t.set(CABundle, file(0o644, bundle.Bytes()))
	return nil
}

// CABundle is the CA bundle's path.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// dpkgStatus records each package's control file in /var/lib/dpkg/status.d, as distroless
// images do, so that image scanners (trivy, grype, syft) see what the root holds. There is
// no dpkg database: dpkg is not in the image.
func (t *tree) dpkgStatus(pkgs []Package) {
	for _, p := range pkgs {
		t.set(path.Join("/var/lib/dpkg/status.d", p.Name), file(0o644, p.Control))
	}
}

const nsswitch = `passwd:         files
group:          files
shadow:         files
gshadow:        files

hosts:          files dns
networks:       files

protocols:      files
services:       files
ethers:         files
rpc:            files
`

const hosts = `127.0.0.1	localhost
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
`
