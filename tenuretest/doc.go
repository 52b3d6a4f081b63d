// Package tenuretest lets you test your own workflows against a real
// PostgreSQL: each test gets a Tenure of its own (a migrated schema, a pool,
// a client and a running worker), may replace activities' functions
// without touching the workflow's code, simulate a crash of the worker in
// the middle of an attempt, and assert how a run ended.
//
//	func TestMain(m *testing.M) { os.Exit(tenuretest.Main(m)) }
//
//	func TestPlaceOrder(t *testing.T) {
//		t.Parallel()
//		env := tenuretest.New(t,
//			tenuretest.Workflows(shop.PlaceOrder),
//			tenuretest.Override(shop.Charge, func(ctx context.Context, o shop.Order) (shop.Receipt, error) {
//				return shop.Receipt{Order: o.ID, Payment: "pay-" + o.ID}, nil // no call to the provider
//			}))
//		run := tenuretest.Start(env, shop.PlaceOrder, shop.Order{ID: "42", Cents: 1999})
//		tracking, err := tenuretest.Result(env, run)
//		...
//	}
//
// # The database
//
// Tests run against DATABASE_URL when it is set. Otherwise the first Env of
// the test process starts a private throwaway PostgreSQL cluster from the
// server programs on PATH (or under /usr/lib/postgresql/*/bin), listening
// on a unix socket only, and Main stops it when the tests end. A test that
// can get neither fails with a message saying how to fix it; it is never
// skipped. Each Env lives in a schema of its own, dropped at the end of the
// test, so tests may call t.Parallel.
//
// # What a test can do
//
//   - New with Workflows, Override, OverrideTx, Configure, ClientOptions and
//     Timeout builds the Env;
//   - Start and Result start a run and wait for its result, failing the test
//     with the run's state and attempts when it takes longer than Timeout;
//   - History and Timeline read the run's attempts;
//   - Crash ends the lease of a run in the middle of an attempt, as a crash
//     of its worker would: the attempt is recorded lost and rescued, or the
//     step fails as indeterminate if it is at most once;
//   - RequireFailed asserts the failure reason and returns the failure row.
//
// Env's Pool, Client, Operator and Worker are the real ones, for anything else.
// docs/testing.md is the guide.
package tenuretest
