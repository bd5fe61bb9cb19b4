package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/redistest"
)

var redisAddr string

func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m, &redisAddr)) }

var bg = context.Background()

// series are the series names a registry exports (a histogram's _bucket,
// _sum and _count, not its family name, which no query finds), each with
// the values seen of each label.
type series map[string]map[string]map[string]bool

// exported registers both collectors, makes them see activity of every
// kind (acquired, busy, released; locks held of each kind, with a waiter),
// and gathers the series they export.
func exported(t *testing.T) series {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := dlock.WithPrefix("monitoring-" + t.Name() + ":")
	col := dlockprom.NewCollector()
	c := dlock.MustNew(rdb, prefix, dlock.WithObserver(col))
	t.Cleanup(func() { _ = c.Close(bg) })
	fleet, err := dlockprom.NewFleetCollector(c)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, fleet)

	l, err := c.TryAcquire(bg, "job:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(bg, "job:1"); err == nil {
		t.Fatal("second TryAcquire of job:1 succeeded")
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		name string
		opts []dlock.AcquireOption
	}{{"order:1", nil}, {"report:1", []dlock.AcquireOption{dlock.WithShared()}}, {"pool:1", []dlock.AcquireOption{dlock.WithPermits(2)}}} {
		if _, err := c.TryAcquire(bg, h.name, h.opts...); err != nil {
			t.Fatal(err)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := series{}
	add := func(name string, m *dto.Metric) {
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		for _, lp := range m.GetLabel() {
			if out[name][lp.GetName()] == nil {
				out[name][lp.GetName()] = map[string]bool{}
			}
			out[name][lp.GetName()][lp.GetValue()] = true
		}
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					add(mf.GetName()+s, m)
				}
				continue
			}
			add(mf.GetName(), m)
		}
	}
	for _, want := range []string{"dlock_acquire_total", "dlock_hold_seconds_bucket", "dlock_fleet_locks", "dlock_fleet_truncated"} {
		if out[want] == nil {
			t.Fatalf("the collectors export no %s: %v", want, out)
		}
	}
	return out
}

// Labels the scrape adds, not the collectors.
var targetLabels = map[string]bool{"job": true, "instance": true}

// unknown returns what expr names that the collectors do not export: a
// metric, a label of a metric, or a label value an equality matcher asks
// for.
func unknown(p parser.Parser, expr string, ex series) ([]string, error) {
	e, err := p.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, sel := range parser.ExtractSelectors(e) {
		var name string
		for _, m := range sel {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		got, ok := ex[name]
		if !ok {
			bad = append(bad, fmt.Sprintf("metric %q", name))
			continue
		}
		for _, m := range sel {
			if m.Name == model.MetricNameLabel || targetLabels[m.Name] {
				continue
			}
			values, ok := got[m.Name]
			if !ok {
				bad = append(bad, fmt.Sprintf("label %s of %s", m.Name, name))
				continue
			}
			if m.Type == labels.MatchEqual && !values[m.Value] {
				bad = append(bad, fmt.Sprintf("%s=%q of %s", m.Name, m.Value, name))
			}
		}
	}
	return bad, nil
}

// The check itself bites: names the collectors do not export are found.
func TestUnknownFindsWrongNames(t *testing.T) {
	ex := exported(t)
	p := parser.NewParser(parser.Options{})
	for expr, want := range map[string]string{
		`rate(dlock_locks_lost_total[5m])`:                         `metric "dlock_locks_lost_total"`,
		`histogram_quantile(0.9, rate(dlock_hold_seconds[5m]))`:    `metric "dlock_hold_seconds"`,
		`sum(dlock_acquire_total{outcome="acquired"})`:             `label outcome of dlock_acquire_total`,
		`sum(dlock_acquire_total{result="acquird"})`:               `result="acquird" of dlock_acquire_total`,
		`max by (group) (dlock_fleet_locks{kind="exclusive"}) > 1`: ``,
	} {
		bad, err := unknown(p, expr, ex)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if strings.Join(bad, "; ") != want {
			t.Errorf("%s: found %q, want %q", expr, bad, want)
		}
	}
}

// The alert rules load as Prometheus loads a rule file, cover what an
// operator is expected to be warned of, and name only exported metrics.
func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("alerts.yml: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	ex := exported(t)
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: wants a severity label, a summary and a description", r.Alert)
			}
			bad, err := unknown(p, r.Expr, ex)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			for _, b := range bad {
				t.Errorf("alert %s names %s, which dlockprom does not export", r.Alert, b)
			}
		}
	}
	for _, want := range []string{"DlockLossRateHigh", "DlockRenewalErrors", "DlockWaitTimeouts", "DlockHeldCountSpike", "DlockLongHold"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s in alerts.yml (has %v)", want, names)
		}
	}
	t.Logf("%d alert rules checked: %v", len(names), names)
}

// Grafana's variables, replaced by values PromQL parses, as Grafana does
// before it sends a query.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	`"$job"`, `".*"`, "$job", "x",
)

// The dashboard is JSON Grafana imports, and each of its queries parses and
// names only exported metrics.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		UID    string
		Panels []struct {
			ID          int
			Type, Title string
			Datasource  *struct{ Type, UID string }
			GridPos     struct{ H, W, X, Y int }
			Targets     []struct{ Expr, RefID string }
		}
		Templating struct {
			List []struct {
				Type, Name string
				Query      any
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard without a title or uid")
	}
	ex := exported(t)
	p := parser.NewParser(parser.Options{})
	check := func(where, expr string) {
		bad, err := unknown(p, grafanaVars.Replace(expr), ex)
		if err != nil {
			t.Errorf("%s: %s: %v", where, expr, err)
		}
		for _, b := range bad {
			t.Errorf("%s names %s, which dlockprom does not export", where, b)
		}
	}
	ids := map[int]bool{}
	queries := 0
	for _, panel := range dash.Panels {
		if ids[panel.ID] {
			t.Errorf("panel id %d twice", panel.ID)
		}
		ids[panel.ID] = true
		if panel.GridPos.X+panel.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the grid: %+v", panel.Title, panel.GridPos)
		}
		if panel.Type == "row" {
			continue
		}
		if panel.Datasource == nil || panel.Datasource.UID != "${datasource}" || len(panel.Targets) == 0 {
			t.Errorf("panel %q: wants the datasource variable and at least one query", panel.Title)
		}
		for _, tg := range panel.Targets {
			queries++
			check(fmt.Sprintf("panel %q query %s", panel.Title, tg.RefID), tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		q, _ := v.Query.(map[string]any)
		if s, _ := q["query"].(string); s != "" {
			// label_values(metric, label) is Grafana's, not PromQL: check its
			// metric.
			if inner, ok := strings.CutPrefix(s, "label_values("); ok {
				metric, _, _ := strings.Cut(inner, ",")
				check("variable "+v.Name, metric)
			}
		}
	}
	if queries < 10 {
		t.Errorf("only %d queries in the dashboard", queries)
	}
	t.Logf("%d panels, %d queries checked", len(dash.Panels), queries)
}
