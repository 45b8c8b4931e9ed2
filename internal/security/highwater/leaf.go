package highwater

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// KeyServerLeaf holds the newest renewable server certificate accepted: its notBefore and
// SHA-256 fingerprint, as JSON. A mark without it (written before renewals were recorded, or
// before any renewable certificate was accepted) is read as recording none.
const KeyServerLeaf = "serverLeaf"

// maxLeafBytes bounds the recorded leaf: a date and a digest take about 120 bytes.
const maxLeafBytes = 1 << 10

// Leaf identifies a renewable server certificate (security.ServerLeaf).
type Leaf struct {
	// NotBefore orders renewals: a later one is newer.
	NotBefore time.Time
	// Digest is "sha256:" and 64 lowercase hex digits of the certificate's DER encoding.
	Digest string
}

// leafRecord is the recorded form.
type leafRecord struct {
	NotBefore time.Time `json:"notBefore"`
	SHA256    string    `json:"sha256"`
}

// encodeLeaf is the recorded form of l: JSON, the date in UTC.
func encodeLeaf(l *Leaf) (string, error) {
	b, err := json.Marshal(leafRecord{NotBefore: l.NotBefore.UTC(), SHA256: l.Digest})
	return string(b), err
}

// decodeLeaf parses a recorded leaf strictly (unknown fields, trailing data, a missing or
// malformed date or digest are errors); "" is no recorded leaf.
func decodeLeaf(s string) (*Leaf, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > maxLeafBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(s), maxLeafBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var r leafRecord
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data")
	}
	if r.NotBefore.IsZero() || !digestPattern.MatchString(r.SHA256) {
		return nil, errors.New("a notBefore and a sha256 digest are required")
	}
	return &Leaf{NotBefore: r.NotBefore, Digest: r.SHA256}, nil
}

// checkLeaf orders an offered renewable server certificate, of a bundle of generation gen,
// against the one the mark records at generation markGen. It returns write=true when the
// mark must record it: it is newer (a later notBefore), none is recorded, or — at a
// generation above markGen only — it is another certificate issued in the recorded one's
// second. It returns nil when it is the recorded one, ErrRollback when it is older (at any
// generation) and ErrDrift when it is another certificate of the recorded one's second at
// markGen. A bundle whose certificate is not renewable (o nil) is not ordered.
//
// The order holds across generations: a generation bump does not readmit an older
// certificate (a restored backup, a leaked key the last renewal replaced). Whoever really
// needs another certificate issues a new one, whose notBefore is later. Two certificates of
// one second (notBefore has one-second precision; cert-manager can issue twice within a
// second) cannot be ordered by the record: the second one is refused until the certificate
// is renewed again, or until the operator raises the generation, a deliberate act that
// chooses it.
func checkLeaf(m, o *Leaf, markGen, gen uint64) (write bool, err error) {
	switch {
	case o == nil:
		return false, nil
	case m == nil:
		return true, nil
	case o.Digest == m.Digest:
		return false, nil
	case o.NotBefore.After(m.NotBefore):
		return true, nil
	case o.NotBefore.Equal(m.NotBefore) && gen > markGen:
		return true, nil
	case o.NotBefore.Equal(m.NotBefore):
		return false, fmt.Errorf("%w: another server certificate was issued in the same second (%s) as the recorded one, "+
			"so it is neither newer nor older; renew the certificate again (a later notBefore), or raise the manifest "+
			"generation above %d to accept this one", ErrDrift, o.NotBefore.UTC().Format(time.RFC3339), markGen)
	}
	return false, fmt.Errorf("%w: a server certificate issued %s, before the accepted one issued %s",
		ErrRollback, o.NotBefore.UTC().Format(time.RFC3339), m.NotBefore.UTC().Format(time.RFC3339))
}
