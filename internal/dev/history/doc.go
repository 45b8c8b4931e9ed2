// Package history records what concurrent clients asked of execplane and what they heard,
// and checks the record against models of the promised behaviour with porcupine: a history
// is correct when some order of its operations, each placed between its call and its
// return, is one the model allows.
//
// Two models: Environment — one environment's run claim (at most one holder, epochs that
// only rise, a claim that ends with its release, a revocation or a replacement) together
// with its files under compare-and-swap (each a register), each of them checked apart, as
// locality allows (no operation acts on two) — and Binding — one environment per binding
// however many Ensure calls race. An operation whose outcome the client could
// not learn (a timeout, an unavailable gateway, an outcome reported unknown) may or may not
// have taken effect, at any time after its call until the recorder's effect bound: the
// models try both. Grants, a direct check beside them, holds every admitted data call to
// a claim the history does not prove ended (through another gateway, within a bound).
package history
