package fileops

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// The durable commands' records are out of the file API's reach: every path into them is
// refused before anything is touched, and walks of the root pass them by; a name that only
// looks alike elsewhere is a name like any other.
func TestReservedDirectoryIsOutOfReach(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{".execplane/commands/c/record", "sub/.execplane/x", ".execplanes"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("needle"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lim := Limits{MaxFileBytes: 1 << 20}
	refused := map[string]*executionv1.FileOperation{
		"read":          {Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(".execplane/commands/c/record")}}},
		"write":         {Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte(".execplane/x"), Content: []byte("x")}}},
		"write via ..":  {Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte("sub/../.execplane/x"), Content: []byte("x")}}},
		"stat":          {Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte("./.execplane")}}},
		"list":          {Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte(".execplane/")}}},
		"remove":        {Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: []byte(".execplane"), Recursive: true}}},
		"rename into":   {Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{From: []byte(".execplanes"), To: []byte(".execplane/y")}}},
		"rename out of": {Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{From: []byte(".execplane/commands"), To: []byte("stolen")}}},
		"copy out of":   {Operation: &executionv1.FileOperation_Copy{Copy: &executionv1.CopyPath{From: []byte(".execplane"), To: []byte("stolen")}}},
		"glob beneath":  {Operation: &executionv1.FileOperation_Glob{Glob: &executionv1.Glob{Base: []byte(".execplane"), Pattern: []byte("**")}}},
		"grep beneath":  {Operation: &executionv1.FileOperation_Grep{Grep: &executionv1.Grep{Path: []byte(".execplane"), Pattern: "needle"}}},
	}
	for name, op := range refused {
		if _, err := r.Do(op, lim); !errors.Is(err, protocol.ErrPermission) {
			t.Errorf("%s: want PERMISSION_DENIED, got %v", name, err)
		}
		f, err := protocol.DescribeFile(op)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Validate(); !errors.Is(err, protocol.ErrPermission) {
			t.Errorf("%s: the gateway's check lets it through: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stolen")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refusal left %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".execplane/commands/c/record")); err != nil || string(b) != "needle" {
		t.Fatalf("the record changed: %q %v", b, err)
	}

	list, err := r.Do(&executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte(".")}}}, lim)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list.GetList().GetEntries() {
		names = append(names, string(e.GetPath()))
	}
	if diff := cmp.Diff([]string{".execplanes", "sub"}, names); diff != "" {
		t.Errorf("the root's listing (-want +got):\n%s", diff)
	}
	viaParent, err := r.Do(&executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte("sub/..")}}}, lim)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range viaParent.GetList().GetEntries() {
		if string(e.GetPath()) == ".execplane" {
			t.Errorf("a listing of the root through sub/.. shows the reserved entry")
		}
	}
	glob, err := r.Do(&executionv1.FileOperation{Operation: &executionv1.FileOperation_Glob{Glob: &executionv1.Glob{Pattern: []byte("**")}}}, lim)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range glob.GetGlob().GetPaths() {
		paths = append(paths, string(p))
	}
	if diff := cmp.Diff([]string{".execplanes", "sub", "sub/.execplane", "sub/.execplane/x"}, paths); diff != "" {
		t.Errorf("a glob of the root (-want +got):\n%s", diff)
	}
	grep, err := r.Do(&executionv1.FileOperation{Operation: &executionv1.FileOperation_Grep{Grep: &executionv1.Grep{Pattern: "needle"}}}, lim)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, m := range grep.GetGrep().GetMatches() {
		found = append(found, string(m.GetPath()))
	}
	if diff := cmp.Diff([]string{".execplanes", "sub/.execplane/x"}, found); diff != "" {
		t.Errorf("a grep of the root (-want +got):\n%s", diff)
	}
}
