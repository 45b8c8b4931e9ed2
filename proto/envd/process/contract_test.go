package envdprocess_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	envdfilesystem "github.com/execplane/execplane/proto/envd/filesystem"
	"github.com/execplane/execplane/proto/envd/filesystem/envdfilesystemconnect"
	envdprocess "github.com/execplane/execplane/proto/envd/process"
	"github.com/execplane/execplane/proto/envd/process/envdprocessconnect"
)

// The names and numbers the `e2b` SDKs put on the wire (docs/e2b.md): a change here breaks
// every unmodified E2B program.
func TestWireContract(t *testing.T) {
	for got, want := range map[string]string{
		envdprocessconnect.ProcessStartProcedure:         "/process.Process/Start",
		envdprocessconnect.ProcessConnectProcedure:       "/process.Process/Connect",
		envdprocessconnect.ProcessListProcedure:          "/process.Process/List",
		envdprocessconnect.ProcessSendInputProcedure:     "/process.Process/SendInput",
		envdprocessconnect.ProcessSendSignalProcedure:    "/process.Process/SendSignal",
		envdprocessconnect.ProcessCloseStdinProcedure:    "/process.Process/CloseStdin",
		envdfilesystemconnect.FilesystemStatProcedure:    "/filesystem.Filesystem/Stat",
		envdfilesystemconnect.FilesystemListDirProcedure: "/filesystem.Filesystem/ListDir",
		envdfilesystemconnect.FilesystemMakeDirProcedure: "/filesystem.Filesystem/MakeDir",
		envdfilesystemconnect.FilesystemMoveProcedure:    "/filesystem.Filesystem/Move",
		envdfilesystemconnect.FilesystemRemoveProcedure:  "/filesystem.Filesystem/Remove",
	} {
		if got != want {
			t.Errorf("procedure %q, want %q", got, want)
		}
	}
	fields := []struct {
		msg    protoreflect.MessageDescriptor
		name   protoreflect.Name
		number protoreflect.FieldNumber
		kind   protoreflect.Kind
	}{
		{(&envdprocess.StartRequest{}).ProtoReflect().Descriptor(), "stdin", 4, protoreflect.BoolKind},
		{(&envdprocess.ProcessEvent_EndEvent{}).ProtoReflect().Descriptor(), "exit_code", 1, protoreflect.Sint32Kind},
		{(&envdprocess.ProcessEvent_StartEvent{}).ProtoReflect().Descriptor(), "pid", 1, protoreflect.Uint32Kind},
		{(&envdprocess.ProcessEvent{}).ProtoReflect().Descriptor(), "keepalive", 4, protoreflect.MessageKind},
		{(&envdprocess.ProcessSelector{}).ProtoReflect().Descriptor(), "tag", 2, protoreflect.StringKind},
		{(&envdfilesystem.EntryInfo{}).ProtoReflect().Descriptor(), "symlink_target", 10, protoreflect.StringKind},
		{(&envdfilesystem.EntryInfo{}).ProtoReflect().Descriptor(), "modified_time", 9, protoreflect.MessageKind},
		{(&envdfilesystem.ListDirRequest{}).ProtoReflect().Descriptor(), "depth", 2, protoreflect.Uint32Kind},
	}
	for _, f := range fields {
		fd := f.msg.Fields().ByName(f.name)
		if fd == nil || fd.Number() != f.number || fd.Kind() != f.kind {
			t.Errorf("%s.%s: %v, want number %d of kind %v", f.msg.FullName(), f.name, fd, f.number, f.kind)
		}
	}
	// Connect's JSON, as the JS SDK reads it: camel-case names, exit code 0 left out.
	end := &envdprocess.ProcessEvent{Event: &envdprocess.ProcessEvent_End{End: &envdprocess.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}}}
	b, err := protojson.Marshal(&envdprocess.StartResponse{Event: end})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := json.Compact(&got, b); err != nil {
		t.Fatal(err)
	}
	if want := `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`; got.String() != want {
		t.Errorf("JSON %s, want %s", got.String(), want)
	}
}
