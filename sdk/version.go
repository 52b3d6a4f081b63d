package sdk

// Version is the release of Tenure this code belongs to, as the core
// module's tag names it: the Go API, the SQL schema (store.LatestVersion) and
// the behaviour described under this heading in CHANGELOG.md. Before v1.0.0 a
// minor release may break compatibility; docs/compatibility.md says what may
// change and what never does.
const Version = "v0.1.0"
