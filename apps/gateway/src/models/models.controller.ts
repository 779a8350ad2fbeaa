import { Controller, Get, Param, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BusClient } from '@cortex/bus';
import {
  BUILTIN_SAMPLING,
  CortexError,
  decodeCatalogue,
  modelAllowed,
  Subjects,
  withSamplingDefaults,
  type CatalogueEntry,
  type ModelFacts,
  type SamplingDefaults,
} from '@cortex/contracts';
import { respondJson } from '../http/error-response.js';
import { contextOf } from '../http/request-context.js';

/**
 * The catalogue merged with the fleet, in OpenAI's list format plus where each model is loaded and
 * what its GGUF header says (read into the catalogue when the model entered it, so before any request).
 */
@Controller()
export class ModelsController {
  constructor(private readonly bus: BusClient) {}

  @Get(['v1/models', 'models'])
  async list(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    await respondJson(req, reply, async () => ({
      object: 'list',
      data: (await this.catalogue(req)).map(toOpenAiModel),
    }));
  }

  @Get(['v1/models/:id', 'models/:id'])
  async one(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    await respondJson(req, reply, async () => {
      const entry = (await this.catalogue(req)).find((m) => m.id === id);
      if (!entry) throw new CortexError('model_not_found', `The model '${id}' does not exist`, { param: 'model' });
      return toOpenAiModel(entry);
    });
  }

  /** The catalogue, or the part of it a stored key with a `models` list may use. */
  private async catalogue(req: FastifyRequest): Promise<CatalogueEntry[]> {
    const catalogue = await this.bus.request(Subjects.routerModels, {}, { decode: decodeCatalogue });
    const key = contextOf(req).principal?.key;
    return key ? catalogue.filter((m) => modelAllowed(key, m.id)) : catalogue;
  }
}

function toOpenAiModel(entry: CatalogueEntry): Record<string, unknown> {
  return {
    id: entry.id,
    object: 'model',
    created: entry.created,
    owned_by: entry.ownedBy,
    loaded: entry.loaded,
    locations: entry.locations.map(location),
    ...(entry.replicas && {
      replicas: { ready: entry.replicas.ready, min: entry.replicas.min, max: entry.replicas.max },
    }),
    context_length: entry.contextSize,
    capabilities: capabilitiesOf(entry),
    pinned: entry.pinned,
    priority: entry.priority,
    sampling: samplingOf(entry),
    ...(entry.facts && { gguf: gguf(entry.facts) }),
    ...(entry.memoryBytes !== undefined && { memory_bytes: entry.memoryBytes }),
    ...(entry.factsError !== undefined && { gguf_error: entry.factsError }),
    ...(entry.upstream && { upstream: { api: entry.upstream.api } }),
    ...(entry.fallback && { fallback: entry.fallback }),
  };
}

/**
 * What a request that sets nothing samples with: the catalogue's defaults, then the GGUF's (once a
 * worker has read its header), then cortex's. A request's own settings win over all three.
 */
function samplingOf(entry: CatalogueEntry): Record<string, number> {
  return requestNames(
    withSamplingDefaults<SamplingDefaults>({}, entry.sampling, entry.facts?.sampling, BUILTIN_SAMPLING),
  );
}

/** Sampling settings by the names requests give them. */
function requestNames(s: SamplingDefaults): Record<string, number> {
  const named = {
    temperature: s.temperature,
    top_p: s.topP,
    top_k: s.topK,
    min_p: s.minP,
    repetition_penalty: s.repetitionPenalty,
    repeat_last_n: s.repeatLastN,
  };
  return Object.fromEntries(Object.entries(named).filter(([, value]) => value !== undefined)) as Record<string, number>;
}

/** Where a model is; one whose file is still being fetched is `downloading`, with the share done. */
function location(l: CatalogueEntry['locations'][number]): Record<string, unknown> {
  const base = { worker: l.workerId, state: l.state as string, in_flight: l.inFlight, queued: l.queued };
  if (!l.download) return base;
  const { bytes, totalBytes } = l.download;
  return {
    ...base,
    state: 'downloading',
    downloaded_bytes: bytes,
    total_bytes: totalBytes,
    progress: totalBytes > 0 ? Math.floor((bytes / totalBytes) * 100) : 0,
  };
}

/** What the model's GGUF header says, known before its weights are fetched. */
function gguf(facts: ModelFacts): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries({
      architecture: facts.architecture,
      parameters: facts.parameters,
      quantization: facts.quantization,
      size_bytes: facts.fileBytes,
      trained_context_length: facts.trainedContextLength,
      template_tools: facts.tools,
      template_reasoning: facts.reasoning,
      sampling: facts.sampling && Object.keys(facts.sampling).length > 0 ? requestNames(facts.sampling) : undefined,
    }).filter(([, value]) => value !== undefined),
  );
}

/**
 * What a model serves, from its catalogue kind (known before it loads), then what its worker found at
 * load (tools, reasoning, vision).
 */
function capabilitiesOf(entry: CatalogueEntry): Record<string, boolean | string> {
  const kind = entry.kind ?? 'chat';
  return { chat: kind === 'chat', embeddings: kind === 'embedding', rerank: kind === 'ranking', ...entry.capabilities };
}
