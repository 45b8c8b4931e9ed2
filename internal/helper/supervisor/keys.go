package supervisor

import (
	"errors"

	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// keyring is what a request gives to prove and seal records: its environment's record keys,
// the first sealing (docs/commands.md "Sealed records"). Empty from a gateway of an older
// release or without record keys: records are then neither sealed nor proved. refused:
// keys were given and this helper refused them (Config.RefuseKeys).
type keyring struct {
	keys    []*helperv1.RecordKey
	refused bool
}

// ringOf is the keys of a request as this helper takes them.
func ringOf(cfg Config, d *helperv1.Durable) keyring {
	if cfg.RefuseKeys && len(d.GetRecordKeys()) > 0 {
		return keyring{refused: true}
	}
	return keyring{keys: d.GetRecordKeys()}
}

// of is one command's keys.
func (k keyring) of(id string) commandKeys {
	c := commandKeys{given: len(k.keys) > 0, refused: k.refused}
	for _, e := range k.keys {
		c.all = append(c.all, protocol.CommandRecordKey(e, id))
	}
	return c
}

// commandKeys are one command's record keys. refused: the request gave keys this helper
// refused (answers then say unverified: nothing is proved).
type commandKeys struct {
	all     []*helperv1.RecordKey
	given   bool
	refused bool
}

// seal is the key new records are sealed with; nil without keys.
func (c commandKeys) seal() *helperv1.RecordKey {
	if len(c.all) == 0 {
		return nil
	}
	return c.all[0]
}

// proved is a record read and proved: sealed under one of the command's keys, or unsealed
// (an older helper's, or the workload's) and marked unverified when keys were given.
type proved struct {
	rec    *helperv1.CommandRecord
	sealed bool
}

// readRecord reads a command's record and proves it (spool.ReadRecord): a sealed record no
// key verifies is a DATA_LOSS refusal.
func readRecord(dir int, keys commandKeys) (proved, error) {
	rec, sealed, err := spool.ReadRecord(dir, keys.all)
	if errors.Is(err, spool.ErrUnverified) {
		return proved{}, errorf(helperv1.ErrorCode_ERROR_CODE_DATA_LOSS, "the command's record is not its supervisor's: it was altered or planted in the workspace")
	}
	if err != nil {
		return proved{}, err
	}
	if (keys.given || keys.refused) && !sealed {
		rec.Info.Unverified = true
	}
	return proved{rec: rec, sealed: sealed}, nil
}

// trusted reports whether what the record says of its supervisor may be acted on (a
// signal): a record sealed under the command's key, or any record when no keys were given
// (an older gateway: the release before sealing, whose behaviour this keeps).
func (p proved) trusted(keys commandKeys) bool { return p.sealed || !keys.given }

// writeKey is the key a record read as p is written back with: a sealed record stays
// sealed; an unsealed one stays unsealed — a helper never seals what it cannot prove.
func (p proved) writeKey(keys commandKeys) *helperv1.RecordKey {
	if p.sealed {
		return keys.seal()
	}
	return nil
}
