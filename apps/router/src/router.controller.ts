import { Controller } from '@nestjs/common';
import { MessagePattern } from '@nestjs/microservices';
import { decodeMessage, PlaceRequest, Subjects, type CatalogueEntry, type FleetView, type Placement } from '@cortex/contracts';
import { FleetRegistry } from './fleet/fleet.registry.js';
import { PlacementService } from './placement/placement.service.js';
import { ROUTER_ID } from './router.tokens.js';
import { Inject } from '@nestjs/common';

@Controller()
export class RouterController {
  constructor(
    private readonly placement: PlacementService,
    private readonly fleet: FleetRegistry,
    @Inject(ROUTER_ID) private readonly routerId: string,
  ) {}

  @MessagePattern(Subjects.routerPlace)
  place(payload: unknown): Promise<Placement> {
    return this.placement.place(decodeMessage(PlaceRequest, payload).model);
  }

  @MessagePattern(Subjects.routerModels)
  models(): CatalogueEntry[] {
    return this.placement.catalogue();
  }

  @MessagePattern(Subjects.routerFleet)
  fleetView(): FleetView {
    return { routerId: this.routerId, workers: this.fleet.views(), catalogue: this.placement.catalogue() };
  }
}
