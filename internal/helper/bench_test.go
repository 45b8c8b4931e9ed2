package helper_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/execplane/execplane/internal/protocol"
)

// The helper's cost is dominated by starting a process, so each benchmark runs the real
// helper binary per operation next to `cat` doing the same I/O in the same run: the ratio
// helper/cat is the overhead of framing, confinement and fsync over a bare process. The
// "session" side sends the same operation over one open session of the same binary (no
// process start: framing, chunks and the operation itself).
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/helper/

func benchWorkspace(b *testing.B) (root string) {
	b.Helper()
	root = b.TempDir()
	must(b, os.WriteFile(filepath.Join(root, "empty"), nil, 0o644))
	must(b, os.WriteFile(filepath.Join(root, "4k"), bytes.Repeat([]byte("x"), 4<<10), 0o644))
	must(b, os.WriteFile(filepath.Join(root, "5m"), bytes.Repeat([]byte("y"), 5<<20), 0o644))
	return root
}

func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func catFile(b *testing.B, path string) {
	out, err := exec.Command("cat", path).Output()
	if err != nil {
		b.Fatal(err)
	}
	_ = out
}

func BenchmarkStat(b *testing.B) {
	root := benchWorkspace(b)
	b.Run("helper", func(b *testing.B) {
		for b.Loop() {
			mustFile(b, root, statOp("4k"))
		}
		reportOps(b)
	})
	b.Run("session", func(b *testing.B) {
		h := openSession(b, root)
		for b.Loop() {
			h.file(b, statOp("4k"))
		}
		reportOps(b)
	})
	b.Run("cat-baseline", func(b *testing.B) {
		for b.Loop() {
			catFile(b, filepath.Join(root, "empty"))
		}
		reportOps(b)
	})
}

func BenchmarkRead4KiB(b *testing.B) {
	root := benchWorkspace(b)
	b.Run("helper", func(b *testing.B) {
		b.SetBytes(4 << 10)
		for b.Loop() {
			if len(mustFile(b, root, readOp("4k")).GetRead().GetContent()) != 4<<10 {
				b.Fatal("short read")
			}
		}
		reportOps(b)
	})
	b.Run("cat-baseline", func(b *testing.B) {
		b.SetBytes(4 << 10)
		for b.Loop() {
			catFile(b, filepath.Join(root, "4k"))
		}
		reportOps(b)
	})
}

func BenchmarkRead5MiB(b *testing.B) {
	root := benchWorkspace(b)
	b.Run("helper", func(b *testing.B) {
		b.SetBytes(5 << 20)
		for b.Loop() {
			r := call(b, root, readRequest("5m"), callOptions{})
			if len(r.resp.GetFile().GetRead().GetContent()) != 5<<20 {
				b.Fatalf("short read: %v", r.resp.GetError())
			}
		}
	})
	b.Run("session", func(b *testing.B) {
		h := openSession(b, root)
		b.SetBytes(5 << 20)
		for b.Loop() {
			resp, err := h.s.Do(b.Context(), readRequest("5m"), protocol.MaxResponseBytes)
			if err != nil || len(resp.GetFile().GetRead().GetContent()) != 5<<20 {
				b.Fatalf("short read: %v %v", resp.GetError(), err)
			}
		}
	})
	b.Run("cat-baseline", func(b *testing.B) {
		b.SetBytes(5 << 20)
		for b.Loop() {
			catFile(b, filepath.Join(root, "5m"))
		}
	})
}

func BenchmarkWrite5MiB(b *testing.B) {
	root := benchWorkspace(b)
	content := bytes.Repeat([]byte("z"), 5<<20)
	b.Run("helper", func(b *testing.B) {
		b.SetBytes(5 << 20)
		for b.Loop() {
			r := call(b, root, writeRequest("out", content), callOptions{})
			if r.resp.GetError() != nil {
				b.Fatal(r.resp.GetError())
			}
		}
	})
	b.Run("session", func(b *testing.B) {
		h := openSession(b, root)
		b.SetBytes(5 << 20)
		for b.Loop() {
			resp, err := h.s.Do(b.Context(), writeRequest("out", content), protocol.MaxResponseBytes)
			if err != nil || resp.GetError() != nil {
				b.Fatal(resp.GetError(), err)
			}
		}
	})
	b.Run("cat-baseline", func(b *testing.B) {
		b.SetBytes(5 << 20)
		for b.Loop() {
			f, err := os.Create(filepath.Join(root, "out-cat"))
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command("cat")
			cmd.Stdin = bytes.NewReader(content)
			cmd.Stdout = f
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
}
