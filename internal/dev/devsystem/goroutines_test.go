package devsystem

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGoroutines(t *testing.T) {
	const profile = "goroutine profile: total 5\n" +
		"3 @ 0x1 0x2 0x3\n" +
		"#\t0x1\truntime.gopark+0xd5\t/go/src/runtime/proc.go:424\n" +
		"#\t0x2\tnet/http.(*persistConn).readLoop+0x9e\t/go/src/net/http/transport.go:2395\n" +
		"\n" +
		"2 @ 0x1 0x4\n" +
		"#\t0x1\truntime.gopark+0xd5\t/go/src/runtime/proc.go:424\n" +
		"#\t0x4\tmain.main+0x10\t/src/main.go:7\n" +
		"\n" +
		"1 @ 0x9\n" + // a block without frames counts nothing
		"\n"
	want := map[string]int{
		"runtime.gopark < net/http.(*persistConn).readLoop": 3,
		"runtime.gopark < main.main":                        2,
	}
	if diff := cmp.Diff(want, ParseGoroutines(profile)); diff != "" {
		t.Fatalf("ParseGoroutines (-want +got):\n%s", diff)
	}
}
