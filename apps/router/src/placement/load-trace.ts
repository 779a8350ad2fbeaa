import { context, SpanKind, trace, type Context, type Span } from '@opentelemetry/api';
import { activeTracer, failSpan } from '@cortex/bus';

/**
 * The span of one model load in this router (`load <model>`), a child of the placement that started
 * it. A request that arrives while the load is under way waits for it instead of starting its own:
 * its placement span gets a link to the load's span (`joined`), so each trace shows the load it
 * waited for, even when another request's trace holds it. While tracing is off it does nothing.
 */
export class LoadTrace {
  private static readonly off = new LoadTrace(null, null);

  private constructor(
    private readonly span: Span | null,
    private readonly ctx: Context | null,
  ) {}

  static start(model: string): LoadTrace {
    const tracer = activeTracer();
    // A load no traced request asked for (a pinned model at start-up) is not traced.
    if (!tracer || !trace.getSpan(context.active())) return LoadTrace.off;
    const span = tracer.startSpan(`load ${model}`, {
      kind: SpanKind.INTERNAL,
      attributes: { 'gen_ai.request.model': model },
    });
    return new LoadTrace(span, trace.setSpan(context.active(), span));
  }

  /** Runs the load in its span's context (its estimate and load requests become children) and ends the span with its outcome. */
  async run<T extends { workerId: string }>(load: () => Promise<T>): Promise<T> {
    const { span, ctx } = this;
    if (!span || !ctx) return load();
    try {
      const placed = await context.with(ctx, load);
      span.setAttribute('cortex.worker.id', placed.workerId);
      return placed;
    } catch (error) {
      failSpan(span, error);
      throw error;
    } finally {
      span.end();
    }
  }

  /** The current request waits for this load: its span links to the load's. */
  joined(): void {
    if (!this.span) return;
    trace
      .getSpan(context.active())
      ?.addLink({ context: this.span.spanContext(), attributes: { 'cortex.link': 'waits for load' } });
  }
}
