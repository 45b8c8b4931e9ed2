package problem

import (
	"errors"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	sentinel := errors.New("invalid thing")
	inner := errors.New("inner")
	var l List
	if !l.Empty() || l.Err(sentinel) != nil {
		t.Fatal("an empty list reported a problem")
	}
	l.Add("a.b", "is %d", 3)
	l.AddErr(errors.New("whole"))
	l.AddAt("c", inner)
	err := l.Err(sentinel)
	if l.Empty() || !errors.Is(err, sentinel) || !errors.Is(err, inner) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"a.b: is 3", "whole", "c: inner"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q missing from %v", want, err)
		}
	}
}
