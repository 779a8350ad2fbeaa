export type { Engine, EngineEvent, EngineModel, GenerateJob, ModelSpec, RetrievalModel } from './engine.types.js';
export { isRetrievalModel } from './engine.types.js';
export { LlamaEngine } from './llama-engine.js';
export { SyntheticEngine, SYNTHETIC_TOKEN } from './synthetic-engine.js';
export { defaultPromptCacheDir } from './prompt-cache.js';
export { ByModelEngine } from './by-model.js';
export { MtmdEngine } from './mtmd/mtmd-engine.js';
export { RemoteEngine } from './remote/remote-engine.js';
