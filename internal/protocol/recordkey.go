package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Record keys (docs/commands.md "What a command's result proves"). A key of the security
// material never reaches an executor: the gateway gives the helper an environment's key,
// derived over the environment's UID, and the helper gives a supervisor its command's key,
// derived over the command id. A record sealed in one environment, or under one id, does
// not verify in another (a fork, a re-created environment) or under another id.
const (
	// RecordKeyBytes is the size of every record key (HMAC-SHA256's output).
	RecordKeyBytes = sha256.Size
	// MaxRecordKeys bounds the keys a request carries: a sealing key and the keys of a
	// rotation.
	MaxRecordKeys = 8
	// RecordFormatSealed is the format of a sealed record (helperv1.SealedRecord); an
	// unsealed record (an older helper's) reads as format 0.
	RecordFormatSealed = 2

	environmentKeyLabel = "execplane environment record key\x00"
	commandKeyLabel     = "execplane command record key\x00"
	recordMACLabel      = "execplane command record v2\x00"
)

// EnvironmentRecordKey is an environment's record key under a key of the security material.
func EnvironmentRecordKey(secret []byte, environmentUID string) []byte {
	return mac(secret, environmentKeyLabel, []byte(environmentUID))
}

// CommandRecordKey is a command's record key under its environment's.
func CommandRecordKey(environmentKey *helperv1.RecordKey, commandID string) *helperv1.RecordKey {
	return &helperv1.RecordKey{Id: environmentKey.GetId(), Key: mac(environmentKey.GetKey(), commandKeyLabel, []byte(commandID))}
}

// RecordMAC is the seal of a record's bytes under its command's key.
func RecordMAC(commandKey []byte, record []byte) []byte {
	return mac(commandKey, recordMACLabel, record)
}

func mac(key []byte, label string, data []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(label))
	h.Write(data)
	return h.Sum(nil)
}

// ValidateRecordKeys checks the keys of a request: at most MaxRecordKeys, each with a key
// id and RecordKeyBytes of key, ids distinct.
func ValidateRecordKeys(keys []*helperv1.RecordKey) error {
	if len(keys) > MaxRecordKeys {
		return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "record_keys: at most %d", MaxRecordKeys)
	}
	seen := map[string]bool{}
	for i, k := range keys {
		if err := ValidateRecordKey(k); err != nil {
			return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "record_keys[%d]: %v", i, err)
		}
		if seen[k.GetId()] {
			return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "record_keys[%d]: id %q twice", i, k.GetId())
		}
		seen[k.GetId()] = true
	}
	return nil
}

// ValidateRecordKey checks one key: an id of 1..64 bytes of [A-Za-z0-9._-] and
// RecordKeyBytes of key.
func ValidateRecordKey(k *helperv1.RecordKey) error {
	if !validKeyID(k.GetId()) {
		return fmt.Errorf("id: 1..64 bytes of [A-Za-z0-9._-]")
	}
	if len(k.GetKey()) != RecordKeyBytes {
		return fmt.Errorf("key: %d bytes", RecordKeyBytes)
	}
	return nil
}

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}
