package helper

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The helper's --mirror mode: the root made equal to the source, the result printed and
// written to the report file; a failure reported there too, and the exit not zero.
func TestRunMirror(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	report := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("content"), 0o640); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"--mirror", src, "--root", dst, "--mirror-report", report}, &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "content" {
		t.Fatalf("the copy: %q %v", b, err)
	}
	written, err := os.ReadFile(report)
	if err != nil || !bytes.Equal(written, out.Bytes()) {
		t.Fatalf("the report %q (%v), printed %q", written, err, out.Bytes())
	}
	var rep MirrorReport
	if err := json.Unmarshal(written, &rep); err != nil || rep.Copied != 1 || rep.Bytes != 7 || rep.Error != "" {
		t.Fatalf("report %+v %v", rep, err)
	}

	out.Reset()
	err = Run(t.Context(), []string{"--mirror", filepath.Join(src, "absent"), "--root", dst, "--mirror-report", report}, &out, &bytes.Buffer{})
	if err == nil {
		t.Fatal("a mirror of an absent source succeeded")
	}
	rep = MirrorReport{}
	if b, _ := os.ReadFile(report); json.Unmarshal(b, &rep) != nil || rep.Error == "" {
		t.Fatalf("the failure's report %q", b)
	}
	for _, args := range [][]string{{"--mirror", "relative", "--root", dst}, {"--mirror", dst, "--root", dst}, {"--mirror", src, "--root", dst, "--mirror-max-entries", "0"}} {
		if err := Run(t.Context(), args, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
