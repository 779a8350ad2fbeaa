import { Controller, Inject, Logger } from '@nestjs/common';
import { Ctx, MessagePattern, Payload } from '@nestjs/microservices';
import type { BusContext } from '@cortex/bus';
import {
  AdminModelCommand,
  AdminPullCommand,
  assertModelKind,
  CatalogueAddCommand,
  CatalogueRemoveCommand,
  CatalogueSetCommand,
  type CatalogueModelReply,
  decodeMessage,
  decodePlaceRequest,
  PinCommand,
  Subjects,
  type CatalogueEntry,
  type FleetView,
  type Placement,
  type PullReply,
} from '@cortex/contracts';
import { FleetRegistry } from './fleet/fleet.registry.js';
import { CatalogueService } from './catalogue/catalogue.service.js';
import { AdminService } from './placement/admin.service.js';
import { LoadCoordinator } from './placement/load-coordinator.js';
import { PlacementService } from './placement/placement.service.js';
import { ROUTER_ID } from './router.tokens.js';

@Controller()
export class RouterController {
  private readonly logger = new Logger('router');

  constructor(
    private readonly placement: PlacementService,
    private readonly admin: AdminService,
    private readonly catalogue: CatalogueService,
    private readonly fleet: FleetRegistry,
    private readonly loads: LoadCoordinator,
    @Inject(ROUTER_ID) private readonly routerId: string,
  ) {}

  @MessagePattern(Subjects.routerPlace)
  async place(@Payload() payload: unknown, @Ctx() context: BusContext): Promise<Placement> {
    const { model, exclude, affinity, prefixes, runId, attempt, kind, readyOnly } = decodePlaceRequest(payload);
    const started = Date.now();
    try {
      const config = await this.catalogue.modelFresh(model);
      assertModelKind(model, config.kind, kind ?? 'chat');
      const placement = await this.placement.placeRun(
        { runId, admitted: (attempt ?? 0) > 0, readyOnly },
        model,
        exclude ?? [],
        { affinity, prefixes },
      );
      this.logger.log({
        msg: `placed ${model} on ${placement.workerId}${placement.coldStart ? ' after a cold load' : ''}`,
        requestId: context.requestId,
        worker: placement.workerId,
        coldStart: placement.coldStart,
        readyOnly,
        ms: Date.now() - started,
      });
      return placement;
    } catch (error) {
      // A ready-only ask that finds no ready worker is expected (a cold model): the gateway asks again once decoded.
      if (readyOnly) throw error;
      this.logger.log({ msg: `could not place ${model}: ${(error as Error).message}`, requestId: context.requestId });
      throw error;
    }
  }

  @MessagePattern(Subjects.routerLoad)
  load(payload: unknown): Promise<Placement> {
    const command = decodeMessage(AdminModelCommand, payload);
    return this.admin.load(command.model, command.worker, command.from === 'console' ? 'console' : 'admin');
  }

  @MessagePattern(Subjects.routerPull)
  pull(payload: unknown): Promise<PullReply> {
    const command = decodeMessage(AdminPullCommand, payload);
    return this.admin.pull(command.model, command.worker, command.all === true);
  }

  @MessagePattern(Subjects.routerUnload)
  unload(payload: unknown) {
    const command = decodeMessage(AdminModelCommand, payload);
    return this.admin.unload(command.model, command.worker);
  }

  @MessagePattern(Subjects.routerPin)
  pin(payload: unknown) {
    const command = decodeMessage(PinCommand, payload);
    return this.admin.pin(command.model, command.pinned);
  }

  @MessagePattern(Subjects.routerCatalogueAdd)
  addModel(payload: unknown): Promise<CatalogueModelReply> {
    return this.admin.addModel(decodeMessage(CatalogueAddCommand, payload).model);
  }

  @MessagePattern(Subjects.routerCatalogueSet)
  setModel(payload: unknown): Promise<CatalogueModelReply> {
    const command = decodeMessage(CatalogueSetCommand, payload);
    return this.admin.setModel(command.id, command.fields);
  }

  @MessagePattern(Subjects.routerCatalogueRemove)
  removeModel(payload: unknown): Promise<CatalogueModelReply> {
    return this.admin.removeModel(decodeMessage(CatalogueRemoveCommand, payload).id);
  }

  @MessagePattern(Subjects.routerModels)
  models(): CatalogueEntry[] {
    return this.catalogue.catalogue();
  }

  @MessagePattern(Subjects.routerFleet)
  fleetView(): FleetView {
    const waiting = this.loads.waitingByModel();
    return {
      routerId: this.routerId,
      workers: this.fleet.views(),
      catalogue: this.catalogue.catalogue(),
      ...(Object.keys(waiting).length > 0 && { waiting }),
    };
  }
}
