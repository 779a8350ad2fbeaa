// The PromQL of the shipped Grafana dashboard, made runnable against Prometheus's HTTP API, and the
// judgement of what Prometheus answered. Pure: scripts/compose-check.mjs does the I/O.

/**
 * Every query of a dashboard: one entry per target of every panel (rows' nested panels included),
 * with Grafana's macros and the dashboard's variables substituted.
 *
 * `variables` maps a template variable to its value (for "All", the variable's allValue); `macros`
 * maps Grafana's interval macros (`__rate_interval`, `__interval`, `__range`) to a duration. A `$name`
 * that neither names is an error, so a variable added to the dashboard cannot slip through unchecked.
 */
export function dashboardQueries(dashboard, { variables, macros }) {
  const panels = [];
  const walk = (list) => {
    for (const panel of list ?? []) {
      panels.push(panel);
      walk(panel.panels);
    }
  };
  walk(dashboard.panels);
  return panels.flatMap((panel) =>
    (panel.targets ?? [])
      .filter((target) => typeof target.expr === 'string' && target.expr.trim() !== '' && !target.hide)
      .map((target) => ({
        panel: panel.title,
        refId: target.refId,
        legend: target.legendFormat ?? '',
        expr: target.expr,
        query: substitute(target.expr, { ...macros, ...variables }),
      })),
  );
}

/** Replaces `$name`, `${name}` and `${name:format}` by `values[name]`; throws on a name it lacks. */
export function substitute(expr, values) {
  return expr.replace(/\$(?:\{(\w+)(?::\w+)?\}|(\w+))/g, (_, braced, bare) => {
    const name = braced ?? bare;
    if (!(name in values)) throw new Error(`the query ${JSON.stringify(expr)} uses $${name}, which has no value here`);
    return values[name];
  });
}

/** The values of the dashboard's template variables when "All" is selected: each one's allValue. */
export function allValues(dashboard) {
  const values = {};
  for (const variable of dashboard.templating?.list ?? []) {
    if (variable.type === 'query' || variable.type === 'custom') {
      if (!variable.includeAll)
        throw new Error(`variable ${variable.name} has no "All" option: give the check a value for it`);
      values[variable.name] = variable.allValue ?? '.*';
    }
  }
  return values;
}

/**
 * What an instant query returned, from the JSON body of GET /api/v1/query. `data` is true when at
 * least one sample has a finite value: an empty vector, or only NaN (histogram_quantile over no
 * observations, a ratio of zeros), is a panel that would show nothing.
 */
export function judge(body) {
  if (body?.status !== 'success')
    return {
      data: false,
      samples: 0,
      shown: `error: ${body?.errorType ?? '?'}: ${body?.error ?? JSON.stringify(body)}`,
    };
  const { resultType, result } = body.data;
  const samples = resultType === 'scalar' ? [{ metric: {}, value: result }] : resultType === 'vector' ? result : [];
  const finite = samples.filter((s) => Number.isFinite(Number(s.value[1])));
  if (finite.length === 0)
    return {
      data: false,
      samples: samples.length,
      shown: samples.length ? `${samples.length} series, none finite (NaN or ±Inf)` : 'no series',
    };
  const largest = finite.reduce((a, b) => (Number(b.value[1]) > Number(a.value[1]) ? b : a));
  const labels = Object.entries(largest.metric)
    .filter(([name]) => name !== '__name__')
    .map(([name, value]) => `${name}=${value}`)
    .join(', ');
  return {
    data: true,
    samples: finite.length,
    shown: `${round(Number(largest.value[1]))}${labels ? ` (${labels})` : ''}`,
  };
}

function round(value) {
  if (value === 0 || Math.abs(value) >= 100) return String(Math.round(value * 100) / 100);
  return String(Number(value.toPrecision(3)));
}
