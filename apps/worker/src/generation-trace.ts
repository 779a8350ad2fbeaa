import { performance } from 'node:perf_hooks';
import { context, SpanKind, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api';
import {
  activeTracer,
  capturingMessageContent,
  genAiInputMessages,
  genAiOperation,
  genAiOutputMessages,
  genAiRequestAttributes,
  genAiResponseAttributes,
} from '@cortex/bus';
import type { GenerateCommand, StreamEventBody, ToolCall } from '@cortex/contracts';

/** The answer as it streams, kept only for a span that opted in to message contents. */
interface Output {
  text: string;
  reasoning: string;
  toolCalls: ToolCall[];
}

/**
 * The span of one generation on this worker (`chat <model>`, the GenAI inference span), held by the
 * worker's run and fed each event the run emits: the first output marks the time to first token, the
 * finish sets the usage and finish reason, an error fails it. It is the child of the `generate`
 * message's span, so it joins the gateway's trace; the run's stream messages carry its context. With
 * OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (and only then) it also records the messages
 * in and the answer out. While tracing is off it does nothing and `run` only calls its function.
 */
export class GenerationTrace {
  private static readonly off = new GenerationTrace(null, null, 0, '');
  private ended = false;
  private firstSeen = false;
  private output: Output | null = null;

  private constructor(
    private readonly span: Span | null,
    private readonly ctx: Context | null,
    private readonly startedAt: number,
    private readonly model: string,
  ) {}

  /** `model` is the id of the model that runs it; `receivedAt` when `generate` arrived (performance.now). */
  static start(command: GenerateCommand, workerId: string, model: string, receivedAt: number): GenerationTrace {
    const tracer = activeTracer();
    if (!tracer) return GenerationTrace.off;
    const operation = genAiOperation('openai.chat', command.request);
    const span = tracer.startSpan(`${operation} ${command.request.model}`, {
      kind: SpanKind.INTERNAL,
      attributes: {
        ...genAiRequestAttributes(operation, command.request),
        'cortex.worker.id': workerId,
        'cortex.run_id': command.runId,
        'cortex.background': command.background === true,
      },
    });
    const generation = new GenerationTrace(span, trace.setSpan(context.active(), span), receivedAt, model);
    if (capturingMessageContent()) {
      span.setAttribute('gen_ai.input.messages', genAiInputMessages(command.request.messages));
      generation.output = { text: '', reasoning: '', toolCalls: [] };
    }
    return generation;
  }

  /** Runs `fn` in the generation's context: the stream it makes and the lines it logs carry its trace. */
  run<T>(fn: () => T): T {
    return this.ctx ? context.with(this.ctx, fn) : fn();
  }

  /** Each event the run emits, before it is published. */
  event(event: StreamEventBody): void {
    const span = this.span;
    if (!span || this.ended) return;
    if (!this.firstSeen && event.type !== 'start' && event.type !== 'keepalive') {
      this.firstSeen = true;
      span.addEvent('gen_ai.first_chunk');
      span.setAttribute('gen_ai.response.time_to_first_chunk', (performance.now() - this.startedAt) / 1000);
    }
    if (this.output) this.collect(this.output, event);
    if (event.type === 'finish') {
      span.setAttributes(genAiResponseAttributes(this.model, event.usage, event.reason));
      if (this.output) span.setAttribute('gen_ai.output.messages', genAiOutputMessages(this.output, event.reason));
      span.setAttributes({
        'cortex.queue_ms': event.timings.queueMs,
        'cortex.prompt_ms': event.timings.promptMs,
        'cortex.decode_tokens_per_second': event.timings.decodeTokensPerSecond,
      });
      this.end();
    } else if (event.type === 'error') {
      span.setAttribute('error.type', event.error.code);
      span.setStatus({ code: SpanStatusCode.ERROR, message: event.error.message });
      this.end();
    }
  }

  private collect(output: Output, event: StreamEventBody): void {
    if (event.type === 'text') output.text += event.text;
    else if (event.type === 'reasoning') output.reasoning += event.text;
    else if (event.type === 'tool_call')
      output.toolCalls[event.index] = { id: event.id, name: event.name, arguments: '' };
    else if (event.type === 'tool_args') {
      const call = output.toolCalls[event.index];
      if (call) call.arguments += event.delta;
    }
  }

  /** Ends the span (once), whatever ended the run. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.span?.end();
  }
}
