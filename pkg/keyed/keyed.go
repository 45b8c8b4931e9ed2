// Package keyed serialises work per key (an environment's name): one holder at a time per
// key, no contention across keys, and no memory kept for keys nobody holds.
package keyed

import "sync"

// Mutex is a set of mutexes, one per key, made on first use and dropped when unused. The
// zero value is ready.
type Mutex struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int
}

// Lock waits for key and returns the function that gives it back.
func (k *Mutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*entry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &entry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// Len is the number of keys held or waited for.
func (k *Mutex) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
