package gateway

import (
	"errors"
	"testing"

	"github.com/execplane/execplane/internal/security"
)

func TestCallSlots(t *testing.T) {
	s := newCallSlots(2)
	a1, err := s.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("a"); !errors.Is(err, security.ErrResourceExhausted) {
		t.Fatalf("third call into a: %v", err)
	}
	b, err := s.acquire("b")
	if err != nil {
		t.Fatalf("another environment: %v", err)
	}
	a1()
	a1() // releasing twice gives back one slot only
	a3, err := s.acquire("a")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := s.acquire("a"); err == nil {
		t.Fatal("a double release freed two slots")
	}
	for _, r := range []func(){a2, a3, b} {
		r()
	}
	if len(s.busy) != 0 {
		t.Fatalf("entries left after every release: %v", s.busy)
	}
}
