import { Type } from 'class-transformer';
import {
  IsArray,
  IsIn,
  IsInt,
  IsNumber,
  IsObject,
  IsOptional,
  IsString,
  Max,
  MaxLength,
  Min,
  ValidateNested,
  ArrayMaxSize,
} from 'class-validator';

export const ROLES = ['system', 'user', 'assistant', 'tool'] as const;
export type Role = (typeof ROLES)[number];

export class ToolCall {
  @IsString() id!: string;
  @IsString() name!: string;
  /** JSON text of the arguments, as the model wrote it. */
  @IsString() arguments!: string;
}

/** One conversation turn after dialect decoding: text only, tool calls and results as fields. */
export class CanonicalMessage {
  @IsIn(ROLES) role!: Role;
  @IsString() content!: string;
  @IsOptional() @IsString() reasoning?: string;
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => ToolCall) toolCalls?: ToolCall[];
  @IsOptional() @IsString() toolCallId?: string;
  @IsOptional() @IsString() name?: string;
}

export class ToolDefinition {
  @IsString() name!: string;
  @IsOptional() @IsString() description?: string;
  @IsOptional() @IsObject() parameters?: Record<string, unknown>;
}

export class Sampling {
  @IsOptional() @IsNumber() @Min(0) @Max(2) temperature?: number;
  @IsOptional() @IsNumber() @Min(0) @Max(1) topP?: number;
  @IsOptional() @IsInt() @Min(0) topK?: number;
  @IsOptional() @IsInt() seed?: number;
  @IsOptional() @IsInt() @Min(1) maxTokens?: number;
  @IsOptional() @IsArray() @ArrayMaxSize(16) @IsString({ each: true }) @MaxLength(256, { each: true }) stop?: string[];
  @IsOptional() @IsNumber() @Min(-2) @Max(2) presencePenalty?: number;
  @IsOptional() @IsNumber() @Min(-2) @Max(2) frequencyPenalty?: number;
}

export class ResponseFormat {
  @IsIn(['text', 'json_object', 'json_schema']) type!: 'text' | 'json_object' | 'json_schema';
  @IsOptional() @IsObject() schema?: Record<string, unknown>;
}

/** The one request shape every dialect decodes into and every worker runs. */
export class CanonicalRequest {
  @IsString() model!: string;
  @IsArray() @ValidateNested({ each: true }) @Type(() => CanonicalMessage) messages!: CanonicalMessage[];
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => ToolDefinition) tools?: ToolDefinition[];
  /** `auto` (default), `required` (some tool must be called) or `function:<name>` (that one). */
  @IsOptional() @IsString() toolChoice?: string;
  /** At most this many tool calls in the reply (`max_tool_calls`; 1 for `parallel_tool_calls: false`). */
  @IsOptional() @IsInt() @Min(1) maxToolCalls?: number;
  @ValidateNested() @Type(() => Sampling) sampling!: Sampling;
  @IsOptional() @ValidateNested() @Type(() => ResponseFormat) responseFormat?: ResponseFormat;
  @IsIn([true, false]) stream!: boolean;
  /** Streams end with a usage frame (OpenAI `stream_options.include_usage`). */
  @IsOptional() @IsIn([true, false]) includeUsage?: boolean;
  /** The client asked to see reasoning (Anthropic `thinking`); dialects that always show it ignore this. */
  @IsOptional() @IsIn([true, false]) showReasoning?: boolean;
  /**
   * Names the conversation this request continues (a session header, `prompt_cache_key`,
   * `conversation`, the first response of a `previous_response_id` chain), so the router can send it
   * to the worker that already holds its prompt prefix.
   */
  @IsOptional() @IsString() @MaxLength(512) affinityKey?: string;
}
