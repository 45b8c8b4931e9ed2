// Package control serves the internal control.v1 API on the controller leader: gateways
// forward every ledger transition here, with the client they authenticated.
//
// Invariants:
//   - Only gateway identities (configured) may call; everyone else is UNAUTHENTICATED, even
//     with a certificate the CA signed.
//   - The caller's policy is resolved from this controller's own security material, never
//     taken from the gateway, so a gateway cannot widen a client's rights.
//   - A replica that does not lead answers UNAVAILABLE (retryable) without touching the
//     ledger.
//   - Errors pass through the one error map (pkg/apierror).
package control
