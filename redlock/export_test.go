package redlock

// Backoff is the pause between busy attempts, for the jitter test.
var Backoff = backoff
