package process

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/precondition"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// A command and everything it forks start as the OOM killer's first choice; the helper's
// own adjustment is what it was before and after.
func TestCommandsAreTheOOMKillersFirstChoice(t *testing.T) {
	if err := OpenOOMScoreAdj(); err != nil {
		precondition.Missing(t, "no %s: %v", oomScoreAdjPath, err)
	}
	t.Cleanup(func() { oomScoreAdj.Close(); oomScoreAdj = nil })
	before, err := os.ReadFile(oomScoreAdjPath)
	if err != nil {
		precondition.Missing(t, "no %s: %v", oomScoreAdjPath, err)
	}
	if strings.TrimSpace(string(before)) == oomVictim {
		t.Fatalf("the test process already has adjustment %s: the test would prove nothing", oomVictim)
	}
	res, err := Run(&executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{
		Shell: "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'",
	}}, Options{Limits: Limits{MaxOutputBytes: 1 << 10, MaxDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.GetStdout().GetHead()); got != oomVictim+"\n"+oomVictim+"\n" {
		t.Fatalf("the command's and its child's adjustments: %q (stderr %q)", got, res.GetStderr().GetHead())
	}
	after, err := os.ReadFile(oomScoreAdjPath)
	if err != nil || string(after) != string(before) {
		t.Fatalf("the helper's adjustment went from %q to %q (%v)", before, after, err)
	}
}
