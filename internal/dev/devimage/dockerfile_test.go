package devimage

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// dockerfile is deploy/images/Dockerfile, which users with Docker build the same images from.
const dockerfile = "../../../deploy/images/Dockerfile"

// Dockerfile bases and what they give an image built on them.
const (
	distrolessNonroot = "gcr.io/distroless/static-debian12:nonroot"
	// distrolessWorkdir is distroless nonroot's WORKDIR, the servers' working directory.
	distrolessWorkdir = "/home/nonroot"
)

// stage is one target of the Dockerfile, as far as the images' shape goes.
type stage struct {
	from         string
	instructions [][2]string // op, argument; continuation lines joined
}

// stages reads the Dockerfile's targets by name.
func stages(t *testing.T) map[string]*stage {
	t.Helper()
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*stage{}
	var cur *stage
	var logical string
	for line := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if logical == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			logical += cont + " "
			continue
		}
		logical += trimmed
		op, arg, _ := strings.Cut(logical, " ")
		logical = ""
		arg = strings.TrimSpace(arg)
		if strings.EqualFold(op, "FROM") {
			f := strings.Fields(arg)
			cur = nil
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				cur = &stage{from: f[0]}
				out[f[2]] = cur
			}
			continue
		}
		if cur != nil {
			cur.instructions = append(cur.instructions, [2]string{strings.ToUpper(op), arg})
		}
	}
	return out
}

// shape is what an image and its Dockerfile target must agree on.
type shape struct {
	Base       Base
	Program    string // the cmd/ program the image carries
	Path       string
	Mode       os.FileMode
	User       string
	WorkingDir string
	Ports      []string
	Entrypoint []string
}

// dockerShape reads a target's shape: its base, the program COPY'd from the build stage's
// /out (its mode --chmod's, else go build's 0755), USER, WORKDIR (else the base's), EXPOSE
// (TCP unless said) and ENTRYPOINT (exec form).
func dockerShape(t *testing.T, s *stage) shape {
	t.Helper()
	var sh shape
	switch s.from {
	case "scratch":
		sh.Base = BaseScratch
	case distrolessNonroot:
		sh.Base, sh.WorkingDir = BaseNonroot, distrolessWorkdir
	default:
		sh.Base = BaseUserland
	}
	for _, in := range s.instructions {
		op, arg := in[0], in[1]
		switch op {
		case "COPY":
			f := strings.Fields(arg)
			if !slices.Contains(f, "--from=build") || len(f) < 2 {
				continue
			}
			src, dst := f[len(f)-2], f[len(f)-1]
			prog, ok := strings.CutPrefix(src, "/out/")
			if !ok {
				continue
			}
			if sh.Program != "" {
				t.Fatalf("two programs copied: %s and %s", sh.Program, prog)
			}
			sh.Program, sh.Path, sh.Mode = prog, dst, 0o755
			for _, o := range f {
				if m, ok := strings.CutPrefix(o, "--chmod="); ok {
					n, err := strconv.ParseUint(m, 8, 32)
					if err != nil {
						t.Fatalf("COPY %s: %v", arg, err)
					}
					sh.Mode = os.FileMode(n)
				}
			}
		case "USER":
			sh.User = arg
		case "WORKDIR":
			sh.WorkingDir = arg
		case "EXPOSE":
			for _, p := range strings.Fields(arg) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				sh.Ports = append(sh.Ports, p)
			}
		case "ENTRYPOINT":
			sh.Entrypoint = nil
			if err := json.Unmarshal([]byte(arg), &sh.Entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: not the exec form: %v", arg, err)
			}
		}
	}
	slices.Sort(sh.Ports)
	return sh
}

// builtShape reads an image's shape; its program is known by its stand-in content
// ("<program>-<suffix>").
func builtShape(t *testing.T, img v1.Image, base Base, path string, mtime time.Time) shape {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	fs := entries(t, img, mtime)
	program, _, _ := strings.Cut(fs[path].Content, "-")
	sh := shape{Base: base, Program: program, Path: path, Mode: os.FileMode(fs[path].Mode),
		User: cf.Config.User, WorkingDir: cf.Config.WorkingDir, Entrypoint: cf.Config.Entrypoint}
	for p := range cf.Config.ExposedPorts {
		sh.Ports = append(sh.Ports, p)
	}
	slices.Sort(sh.Ports)
	// What distroless nonroot gives the user: a passwd entry naming it, and its home.
	if base == BaseNonroot {
		uid, _, _ := strings.Cut(sh.User, ":")
		if !strings.Contains(fs["/etc/passwd"].Content, ":x:"+uid+":") || fs[distrolessWorkdir].UID != nonrootID {
			t.Errorf("the non-root user %s has no passwd entry or home: %+v %+v", uid, fs["/etc/passwd"], fs[distrolessWorkdir])
		}
	}
	return sh
}

// targetOf is the Dockerfile target each product image is built by.
var targetOf = map[string]string{"gateway": "gateway", "controller": "controller", "helper": "helper", "executor": "executor-example", "e2b": "e2b"}

// The images built here — the product images of `make images` and the dev stack's helper
// and executor — and deploy/images/Dockerfile's targets agree on what their users rely on:
// the base, the program's path and mode, the user, the working directory, the exposed
// ports, the entrypoint. Every target but the build stage is a product image.
func TestImagesMatchTheDockerfile(t *testing.T) {
	targets := stages(t)
	var names []string
	for n := range targets {
		if n != "build" {
			names = append(names, n)
		}
	}
	var described []string
	for _, n := range targetOf {
		described = append(described, n)
	}
	slices.Sort(names)
	slices.Sort(described)
	if diff := cmp.Diff(described, names); diff != "" {
		t.Fatalf("Dockerfile targets vs product images (-Go +Dockerfile):\n%s", diff)
	}

	built := build(t, release(t, amd64, nil))
	for _, spec := range Specs() {
		s := targets[targetOf[spec.Name]]
		want := dockerShape(t, s)
		got := builtShape(t, built[spec.Name].Image, spec.Base, spec.Path, commitTime)
		got.Program = strings.TrimSuffix(got.Program, "-linux_amd64")
		if spec.Program != got.Program {
			t.Errorf("%s carries %q, its spec says %q", spec.Name, got.Program, spec.Program)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: (-Dockerfile +built):\n%s", spec.Name, diff)
		}
	}
	dev := images(t)
	for target, ref := range map[string]string{"helper": HelperRef, "executor-example": ExecutorRef} {
		base := BaseScratch
		if ref == ExecutorRef {
			base = BaseUserland
		}
		want := dockerShape(t, targets[target])
		if diff := cmp.Diff(want, builtShape(t, dev[ref], base, HelperPath, time.Time{})); diff != "" {
			t.Errorf("%s: (-Dockerfile +built):\n%s", ref, diff)
		}
	}
}
