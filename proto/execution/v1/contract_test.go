package executionv1_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// The public contract: exactly these RPCs, in this order (DESIGN.md, issue "Foundation").
var contract = []string{
	"ValidateProfile", "EnsureEnvironment", "AttachEnvironment", "ReleaseReference", "Files",
	"StartCommand", "CommandStatus", "CancelCommand", "AcquireRun", "RenewRun", "ReleaseRun",
	"ReserveSuccessor", "CommitReference", "AbortReference", "PrepareReferenceDelete",
	"ConfirmReferenceDelete", "CancelReferenceDelete", "ListReferenceIntents",
	"RetireEnvironment", "ReplaceExecutor", "RevokeEnvironment", "RecoverEnvironment",
	"MigrateEnvironment", "DeleteRetiredEnvironment",
}

// additions are the RPCs added since, after the contract's, with how each streams: the
// contract's RPCs keep their names, order and meaning.
var additions = []struct {
	name                 string
	clientSends, streams bool
	// output names the message it returns when it is not <name>Response (the events of a
	// stream shared by two RPCs).
	output string
}{
	{"WriteFileStream", true, false, ""},
	{"ReadFileStream", false, true, ""},
	{"RunCommand", false, true, "CommandEvent"},
	{"WatchCommand", false, true, "CommandEvent"},
	{"ListCommands", false, false, ""},
	{"Terminal", true, true, ""},
	{"SuspendEnvironment", false, false, ""},
	{"ResumeEnvironment", false, false, ""},
	{"DeleteEnvironment", false, false, ""},
	{"SetEnvironmentRetention", false, false, ""},
	{"SetEnvironmentDeadline", false, false, ""},
	{"ListEnvironments", false, false, ""},
	{"GetUsage", false, false, ""},
	{"ListUsage", false, false, ""},
	{"CreateSnapshot", false, false, ""},
	{"GetSnapshot", false, false, ""},
	{"ListSnapshots", false, false, ""},
	{"DeleteSnapshot", false, false, ""},
}

func TestServiceHasExactlyTheContractRPCs(t *testing.T) {
	svc := executionv1grpc.File_execution_v1_executionv1grpc_service_proto.Services().ByName("ExecutionProviderService")
	if svc == nil {
		t.Fatal("no ExecutionProviderService in the generated descriptor")
	}
	if got := svc.FullName(); got != "execution.v1.ExecutionProviderService" {
		t.Fatalf("service full name %q", got)
	}
	var got []string
	methods := svc.Methods()
	if methods.Len() != len(contract)+len(additions) {
		t.Fatalf("%d RPCs, want the %d of the contract and %d additions", methods.Len(), len(contract), len(additions))
	}
	for i := range methods.Len() {
		m := methods.Get(i)
		if i >= len(contract) {
			a := additions[i-len(contract)]
			if string(m.Name()) != a.name || m.IsStreamingClient() != a.clientSends || m.IsStreamingServer() != a.streams {
				t.Errorf("RPC %d is %s (client stream %v, server stream %v), want %+v", i, m.Name(), m.IsStreamingClient(), m.IsStreamingServer(), a)
			}
		} else {
			got = append(got, string(m.Name()))
			if m.IsStreamingClient() || m.IsStreamingServer() {
				t.Errorf("%s streams; the contract is unary", m.Name())
			}
		}
		if want := string(m.Name()) + "Request"; string(m.Input().Name()) != want {
			t.Errorf("%s takes %s, want %s", m.Name(), m.Input().Name(), want)
		}
		want := string(m.Name()) + "Response"
		if i >= len(contract) && additions[i-len(contract)].output != "" {
			want = additions[i-len(contract)].output
		}
		if string(m.Output().Name()) != want {
			t.Errorf("%s returns %s, want %s", m.Name(), m.Output().Name(), want)
		}
	}
	if len(contract) != 24 {
		t.Fatalf("the contract list has %d entries", len(contract))
	}
	if !slices.Equal(got, contract) {
		t.Fatalf("RPCs = %v\nwant   %v", got, contract)
	}
}

// Every mutating RPC carries an operation id (idempotency key), and every data-plane RPC a
// run grant: checked on the descriptor so that a field cannot silently disappear.
func TestRequestShapes(t *testing.T) {
	fd := executionv1.File_execution_v1_execution_proto
	mutating := []string{
		"EnsureEnvironment", "ReleaseReference", "AcquireRun", "RenewRun", "ReleaseRun",
		"ReserveSuccessor", "CommitReference", "AbortReference", "PrepareReferenceDelete",
		"ConfirmReferenceDelete", "CancelReferenceDelete", "RetireEnvironment", "ReplaceExecutor",
		"RevokeEnvironment", "RecoverEnvironment", "MigrateEnvironment", "DeleteRetiredEnvironment",
		"SuspendEnvironment", "ResumeEnvironment", "DeleteEnvironment", "SetEnvironmentRetention",
	}
	for _, name := range mutating {
		assertField(t, fd, name+"Request", "operation_id", protoreflect.StringKind)
	}
	for _, name := range []string{"Files", "WriteFileStream", "ReadFileStream", "StartCommand", "CommandStatus", "CancelCommand", "RenewRun", "ReleaseRun", "RunCommand", "WatchCommand", "ListCommands"} {
		assertField(t, fd, name+"Request", "run_grant", protoreflect.MessageKind)
	}
	// A terminal's grant is in its first message.
	assertField(t, fd, "TerminalStart", "run_grant", protoreflect.MessageKind)
	assertField(t, fd, "AcquireRunRequest", "environment_grant", protoreflect.MessageKind)
	for _, name := range []string{"RetireEnvironment", "ReplaceExecutor", "RevokeEnvironment", "RecoverEnvironment", "MigrateEnvironment", "DeleteRetiredEnvironment"} {
		assertField(t, fd, name+"Request", "preconditions", protoreflect.MessageKind)
	}
	// Paths are bytes so that non-UTF-8 names round-trip.
	for _, msg := range []string{"ReadFile", "WriteFile", "StatFile", "ListDirectory", "MakeDirectory", "RemovePath"} {
		assertField(t, fd, msg, "path", protoreflect.BytesKind)
	}
	fo := fd.Messages().ByName("FileOperation").Oneofs().ByName("operation")
	if fo == nil || fo.Fields().Len() != 10 {
		t.Fatalf("FileOperation must offer the 10 file operations")
	}
	fr := fd.Messages().ByName("FileResult").Oneofs().ByName("result")
	if fr == nil || fr.Fields().Len() != 10 {
		t.Fatalf("FileResult must offer the 10 results")
	}
}

func assertField(t *testing.T, fd protoreflect.FileDescriptor, msg, field string, kind protoreflect.Kind) {
	t.Helper()
	m := fd.Messages().ByName(protoreflect.Name(msg))
	if m == nil {
		t.Errorf("message %s missing", msg)
		return
	}
	f := m.Fields().ByName(protoreflect.Name(field))
	if f == nil {
		t.Errorf("%s has no field %s", msg, field)
		return
	}
	if f.Kind() != kind {
		t.Errorf("%s.%s is %v, want %v", msg, field, f.Kind(), kind)
	}
}

// The messages' Go package must not depend on gRPC: the helper links it.
func TestMessagesPackageHasNoService(t *testing.T) {
	if n := executionv1.File_execution_v1_execution_proto.Services().Len(); n != 0 {
		t.Fatalf("execution.proto declares %d services; keep them in executionv1grpc", n)
	}
}
