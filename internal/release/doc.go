// Package release holds the checks that the repository's Go modules can be
// published: it has no code of its own, only tests (see docs/RELEASING.md).
//
// The tests that always run read every go.mod in the repository: each
// module is either published (tagged and fetched by users) or listed as
// unpublished with its reason, and a published nested module requires a
// released version of the root module (never a pseudo-version that no
// proxy serves) while keeping its replace directive for development; a
// module with a main package (the CLI, which users `go install
// ...@version`) has no replace in its go.mod, only in a go.work beside it;
// and a module requiring only the root gets none of the CLI's or
// dlockprom's dependencies in its module graph.
//
// TestConsumer, run by `make release-check` (DLOCK_RELEASE_CHECK=1), does
// what a user outside the repository does once the modules are tagged: it
// builds a file-system module proxy holding the published modules at the
// release version, made from the working tree, and builds, vets and runs a
// consumer module in a temporary directory against it, with GOWORK off and
// the modules' replace directives out of reach.
package release
