package grant

import (
	"sync"
	"testing"
)

// TestConcurrentUse signs and verifies from many goroutines at once on one signer and one
// verifier; run with -race it proves both are safe to share.
func TestConcurrentUse(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 16 {
		wg.Go(func() {
			for range 20 {
				g, err := f.signer.SignRun(testRunBinding())
				if err == nil {
					_, err = f.verifier.VerifyRun(g.Token, testRunBinding())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
