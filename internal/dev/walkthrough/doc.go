// Package walkthrough is the demo's session — ensure, wait Ready, acquire, write, run,
// read, release, retire, delete-retired — walked by a caller and an administrator through
// any gateway: the development stack's (make demo) and the chart's (make deploy, the
// deployment test). Each step prints what it saw and how long it took.
package walkthrough
