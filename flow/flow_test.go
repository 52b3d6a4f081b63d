package flow_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// Each limit that makes no sense is refused by Validate with an error that
// wraps ErrInvalid and names it, and by New with a panic that does the same.
func TestValidate_EachBadLimitIsNamed(t *testing.T) {
	rate := func(n int, per time.Duration, burst int) *flow.RateLimit {
		return &flow.RateLimit{N: n, Per: per, Burst: burst}
	}
	budget := func(ratio, perS float64) *flow.RetryBudget { return &flow.RetryBudget{Ratio: ratio, PerSecond: perS} }
	breaker := func(ratio float64, minCalls int, window, open time.Duration) *flow.BreakerPolicy {
		return &flow.BreakerPolicy{ErrorRatio: ratio, MinCalls: minCalls, Window: window, OpenFor: open}
	}
	for _, tc := range []struct {
		name   string
		limits flow.Limits
		want   string // the start of the error
	}{
		{"negative concurrency", flow.Limits{Concurrency: -1}, "concurrency = -1"},
		{"rate of zero", flow.Limits{Rate: rate(0, time.Second, 1)}, "rate = 0"},
		{"negative rate", flow.Limits{Rate: rate(-5, time.Second, 1)}, "rate = -5"},
		{"rate without an interval", flow.Limits{Rate: rate(5, 0, 1)}, "rate interval (at least 1ms) = 0s"},
		{"rate interval under a millisecond", flow.Limits{Rate: rate(5, 999*time.Microsecond, 1)}, "rate interval (at least 1ms) = 999µs"},
		{"burst of zero", flow.Limits{Rate: rate(5, time.Second, 0)}, "rate burst (at least 1) = 0"},
		{"negative retry ratio", flow.Limits{RetryBudget: budget(-0.1, 1)}, "retry budget ratio = -0.1"},
		{"retry ratio NaN", flow.Limits{RetryBudget: budget(math.NaN(), 1)}, "retry budget ratio = NaN"},
		{"retry ratio infinite", flow.Limits{RetryBudget: budget(math.Inf(1), 1)}, "retry budget ratio = +Inf"},
		{"negative retries a second", flow.Limits{RetryBudget: budget(0.2, -1)}, "retry budget per second = -1"},
		{"retries a second NaN", flow.Limits{RetryBudget: budget(0.2, math.NaN())}, "retry budget per second = NaN"},
		{"retries a second infinite", flow.Limits{RetryBudget: budget(0.2, math.Inf(1))}, "retry budget per second = +Inf"},
		{"breaker error ratio of zero", flow.Limits{Breaker: breaker(0, 10, time.Second, time.Second)}, "breaker error ratio (above 0, at most 1) = 0"},
		{"breaker error ratio above one", flow.Limits{Breaker: breaker(1.5, 10, time.Second, time.Second)}, "breaker error ratio (above 0, at most 1) = 1.5"},
		{"breaker error ratio NaN", flow.Limits{Breaker: breaker(math.NaN(), 10, time.Second, time.Second)}, "breaker error ratio (above 0, at most 1) = NaN"},
		{"breaker minimum calls of zero", flow.Limits{Breaker: breaker(0.5, 0, time.Second, time.Second)}, "breaker minimum calls = 0"},
		{"breaker window under a millisecond", flow.Limits{Breaker: breaker(0.5, 10, time.Microsecond, time.Second)}, "breaker window (at least 1ms) = 1µs"},
		{"breaker open time of zero", flow.Limits{Breaker: breaker(0.5, 10, time.Second, 0)}, "breaker open time (at least 1ms) = 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if !errors.Is(err, flow.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.want+":") {
				t.Fatalf("Validate() = %v, want %q wrapping ErrInvalid", err, tc.want)
			}
		})
	}
	// The boundaries are valid.
	ok := flow.Limits{Concurrency: 1, Rate: rate(1, time.Millisecond, 1), RetryBudget: budget(0, 0),
		Breaker: breaker(1, 1, time.Millisecond, time.Millisecond)}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the smallest valid limits: %v", err)
	}
	if err := (flow.Limits{}).Validate(); err != nil {
		t.Fatalf("no limits: %v", err)
	}
}

// panicOf returns the error New panicked with.
func panicOf(t *testing.T, declare func()) error {
	t.Helper()
	var p any
	func() {
		defer func() { p = recover() }()
		declare()
	}()
	err, ok := p.(error)
	if !ok {
		t.Fatalf("panic value %T %v, want an error", p, p)
	}
	return err
}

func TestNew_PanicsOnABadNameOrLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		declare func()
		want    string
	}{
		{"empty name", func() { flow.New("") }, `flow.New(""): the name must be 1 to 200 bytes`},
		{"name too long", func() { flow.New(strings.Repeat("x", 201)) }, "the name must be 1 to 200 bytes"},
		{"bad limit", func() { flow.New("api", flow.Concurrency(-2)) }, `flow.New("api"): concurrency = -2`},
		{"bad breaker", func() { flow.New("api", flow.Breaker(flow.BreakerPolicy{ErrorRatio: 2})) }, "breaker error ratio"},
		{"negative budget", func() { flow.New("api", flow.WithRetryBudget(-1, 0)) }, "retry budget ratio = -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := panicOf(t, tc.declare)
			if !errors.Is(err, flow.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("panic %v, want %q wrapping ErrInvalid", err, tc.want)
			}
		})
	}
	if d := flow.New(strings.Repeat("x", 200)); len(d.Name()) != 200 {
		t.Fatal("a 200-byte name is refused")
	}
}

// Breaker's zero fields take the defaults the database has for its
// columns; the fields set are kept.
func TestBreaker_ZeroFieldsTakeTheDefaults(t *testing.T) {
	got := *flow.New("api", flow.Breaker(flow.BreakerPolicy{})).Limits().Breaker
	want := flow.BreakerPolicy{ErrorRatio: 0.5, MinCalls: 10, Window: 10 * time.Second, OpenFor: 5 * time.Second}
	if got != want {
		t.Fatalf("Breaker(BreakerPolicy{}) = %+v, want %+v", got, want)
	}
	got = *flow.New("api", flow.Breaker(flow.BreakerPolicy{MinCalls: 3, Window: time.Minute})).Limits().Breaker
	want = flow.BreakerPolicy{ErrorRatio: 0.5, MinCalls: 3, Window: time.Minute, OpenFor: 5 * time.Second}
	if got != want {
		t.Fatalf("partial policy = %+v, want %+v", got, want)
	}
	if flow.New("api").Limits().Breaker != nil {
		t.Fatal("a downstream without Breaker has a breaker")
	}
}

// A downstream has DefaultRetryBudget unless an option says otherwise; the
// last option that sets the budget wins.
func TestNew_RetryBudgetDefaultsAndNoRetryBudget(t *testing.T) {
	if b := flow.New("api").Limits().RetryBudget; b == nil || *b != flow.DefaultRetryBudget {
		t.Fatalf("default budget %+v, want %+v", b, flow.DefaultRetryBudget)
	}
	if flow.DefaultRetryBudget != (flow.RetryBudget{Ratio: 0.2, PerSecond: 10}) {
		t.Fatalf("DefaultRetryBudget = %+v, want 20 %% + 10/s as documented", flow.DefaultRetryBudget)
	}
	if b := flow.New("api", flow.NoRetryBudget()).Limits().RetryBudget; b != nil {
		t.Fatalf("NoRetryBudget left %+v", b)
	}
	if b := flow.New("api", flow.NoRetryBudget(), flow.WithRetryBudget(0.5, 2)).Limits().RetryBudget; b == nil || *b != (flow.RetryBudget{Ratio: 0.5, PerSecond: 2}) {
		t.Fatalf("WithRetryBudget after NoRetryBudget: %+v", b)
	}
	if b := flow.New("api", flow.WithRetryBudget(0.5, 2), flow.NoRetryBudget()).Limits().RetryBudget; b != nil {
		t.Fatalf("NoRetryBudget after WithRetryBudget: %+v", b)
	}
	// Each downstream has a budget of its own: changing one changes no other.
	a, b := flow.New("a"), flow.New("b")
	a.Limits().RetryBudget.Ratio = 0.9
	if b.Limits().RetryBudget.Ratio != 0.2 || flow.DefaultRetryBudget.Ratio != 0.2 {
		t.Fatal("downstreams share their default budget")
	}
}

// roundTrips are limits whose durations are whole milliseconds, as the
// database stores them.
var roundTrips = map[string]flow.Limits{
	"none":        {},
	"concurrency": {Concurrency: 7},
	"rate":        {Rate: &flow.RateLimit{N: 50, Per: time.Minute, Burst: 5}},
	"budget":      {RetryBudget: &flow.RetryBudget{Ratio: 0.25, PerSecond: 0}},
	"breaker":     {Breaker: &flow.BreakerPolicy{ErrorRatio: 0.3, MinCalls: 4, Window: 2500 * time.Millisecond, OpenFor: 90 * time.Second}},
	"all": {Concurrency: 20, Rate: &flow.RateLimit{N: 50, Per: time.Second, Burst: 10},
		RetryBudget: &flow.RetryBudget{Ratio: 0.2, PerSecond: 10},
		Breaker:     &flow.BreakerPolicy{ErrorRatio: 0.5, MinCalls: 10, Window: 10 * time.Second, OpenFor: 5 * time.Second}},
}

func TestLimits_JSONRoundTrip(t *testing.T) {
	for name, l := range roundTrips {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			var back flow.Limits
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, l) {
				t.Fatalf("%s decodes to %v, want %v", b, back, l)
			}
		})
	}
	// Decoding replaces what the value held; a rate or a budget missing a
	// key is no limit; garbage is an error.
	l := roundTrips["all"]
	if err := json.Unmarshal([]byte(`{"rate": 5, "retry_ratio": 0.1}`), &l); err != nil || !reflect.DeepEqual(l, flow.Limits{}) {
		t.Fatalf("partial rate and budget decode to %v, %v; want no limits", l, err)
	}
	if err := json.Unmarshal([]byte(`{"concurrency": "ten"}`), &l); err == nil {
		t.Fatal("a string concurrency decodes")
	}
}

// The JSON of Limits is the JSON of the database's rows: declared through
// declare_downstream, a downstream's row reads back, through SQL's _limits,
// as the limits declared.
func TestLimits_JSONIsWhatTheDatabaseStores(t *testing.T) {
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	for name, l := range roundTrips {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), `SELECT `+ident+`.declare_downstream($1, $2::jsonb, 'test')`, name, string(b)); err != nil {
			t.Fatalf("%s: declare %s: %v", name, b, err)
		}
		var stored string
		if err := pool.QueryRow(t.Context(), `SELECT `+ident+`._limits(d)::text FROM `+ident+`.downstreams d WHERE d.name = $1`, name).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		var back flow.Limits
		if err := json.Unmarshal([]byte(stored), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, l) {
			t.Errorf("%s: declared %s, the row holds %s: %v", name, b, stored, back)
		}
	}
}

func TestLimits_String(t *testing.T) {
	for _, tc := range []struct {
		limits flow.Limits
		want   string
	}{
		{flow.Limits{}, "no limits"},
		{roundTrips["all"], "concurrency 20, rate 50/1s burst 10, retries 20%+10/s, breaker 50% of 10 in 10s, open 5s"},
		// Ratios print as people write them, not as float64 multiplies them.
		{flow.Limits{RetryBudget: &flow.RetryBudget{Ratio: 0.29, PerSecond: 0.5}}, "retries 29%+0.5/s"},
		{flow.Limits{Breaker: &flow.BreakerPolicy{ErrorRatio: 0.07, MinCalls: 1, Window: time.Second, OpenFor: time.Minute}}, "breaker 7% of 1 in 1s, open 1m0s"},
	} {
		if got := tc.limits.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
