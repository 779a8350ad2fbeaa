export type { Engine, EngineEvent, EngineModel, GenerateJob, ModelSpec, RetrievalModel } from './engine.types.js';
export { isRetrievalModel } from './engine.types.js';
export { LlamaEngine } from './llama-engine.js';
export { SyntheticEngine, SYNTHETIC_TOKEN } from './synthetic-engine.js';
export { defaultPromptCacheDir } from './prompt-cache.js';
