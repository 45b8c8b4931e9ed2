package keyed

import (
	"sync"
	"sync/atomic"
	"testing"
)

// One holder per key at a time, keys independent, and nothing kept once all are given back.
func TestMutexSerialisesPerKeyAndForgets(t *testing.T) {
	var k Mutex
	var inside [2]atomic.Int32
	var overlap atomic.Bool
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			unlock := k.Lock(key)
			if inside[i%2].Add(1) != 1 {
				overlap.Store(true)
			}
			inside[i%2].Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if overlap.Load() {
		t.Fatal("two holders of one key at once")
	}
	if n := k.Len(); n != 0 {
		t.Fatalf("%d keys kept after every holder gave its key back", n)
	}
	// Different keys do not wait for each other.
	unlockA := k.Lock("a")
	unlockB := k.Lock("b")
	unlockB()
	unlockA()
}
