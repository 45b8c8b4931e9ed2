package store

import (
	"crypto/rand"
	"encoding/hex"
)

// claimIDBytes is a run claim id's entropy: 128 bits, unguessable.
const claimIDBytes = 16

func randomID() string {
	b := make([]byte, claimIDBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}
