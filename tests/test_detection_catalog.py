"""The detection training cases (benchmarks/{faster_rcnn,retinanet,mask_rcnn}/pytorch) against
published figures, and the shared detection code (benchmarks/driver/torch/detection.py).

* Each case's standard model has torchvision's published parameter count (the weights meta
  ``num_params`` of ``*_ResNet50_FPN_Weights.COCO_V1``, built with frozen BatchNorm as there),
  built on the meta device (no memory).
* The cpu profiles' backbone checkpoint, written by ``data prepare coco2017``, has the SHA-256
  the profiles pin and loads into their backbone; a checkpoint lacking weights is refused.
* FlagPerf's schedule (warmup in the first epoch, x gamma at the epochs of ``lr_steps``) and
  COCO scoring (the ground truth as detections scores AP 1).
* One real cpu-profile round of each case through its entry script reaches its target.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from case_model import case_config, case_model
from driver.torch import detection
from driver.torch.trainer import TrainingPlan
from flagperf_ansible import datasets
from flagperf_ansible.config.cases import load_case, profile_of

ROOT = Path(__file__).resolve().parents[1]

#: torchvision's weights meta ``num_params`` (FasterRCNN_ResNet50_FPN_Weights,
#: RetinaNet_ResNet50_FPN_Weights, MaskRCNN_ResNet50_FPN_Weights, ``COCO_V1``): 91 classes.
PUBLISHED_PARAMS = {
    "faster_rcnn": 41_755_286,
    "retinanet": 34_014_999,
    "mask_rcnn": 44_401_393,
}
CASES = list(PUBLISHED_PARAMS)


@pytest.fixture(scope="module")
def coins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("coco2017")
    datasets.prepare("coco2017", root)
    return root


# -- the catalog against published figures ----------------------------------------------------

@pytest.mark.parametrize("model", CASES)
def test_standard_model_has_the_published_parameter_count(model):
    config = case_config(model)
    config["init_checkpoint"] = None
    with torch.device("meta"):
        net = case_model(model).build_model(config)
    assert sum(p.numel() for p in net.parameters()) == PUBLISHED_PARAMS[model]
    # FlagPerf's builder freezes conv1 and layer1 of the ImageNet backbone (3 trainable stages).
    frozen = [n for n, p in net.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(("backbone.body.conv1", "backbone.body.layer1"))
                          for n in frozen)


@pytest.mark.parametrize("model", CASES)
def test_cpu_checkpoint_is_pinned_and_loads(model, coins):
    case = load_case(ROOT, model, "pytorch")
    label, params = profile_of(ROOT, case, "cpu")
    pinned = label["checkpoint"]
    data = (coins / pinned["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == pinned["sha256"]
    assert params["init_checkpoint"] == pinned["path"]
    state = detection.load_resnet_state(coins / pinned["path"])
    net = case_model(model).build_model(case_config(model, "cpu"), coins)
    body = net.backbone.body.state_dict()
    assert torch.equal(body["layer3.0.conv2.weight"], state["layer3.0.conv2.weight"])


def test_a_checkpoint_lacking_backbone_weights_is_refused(coins, tmp_path):
    state = detection.load_resnet_state(coins / "checkpoint/resnet10-random.pth")
    del state["layer2.0.conv1.weight"]
    torch.save(state, tmp_path / "broken.pth")
    config = {**case_config("faster_rcnn", "cpu"), "init_checkpoint": "broken.pth"}
    with pytest.raises(ValueError, match=r"broken.pth: lacks 1 weights of the backbone, e.g. "
                                         r"layer2.0.conv1.weight"):
        detection.resnet_fpn_backbone(config, tmp_path)
    (tmp_path / "text.pth").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="text.pth: not a torch.save'd state dict"):
        detection.load_resnet_state(tmp_path / "text.pth")


# -- the shared detection code ------------------------------------------------------------------

def test_schedule_warms_up_in_the_first_epoch_then_steps_at_epochs():
    config = {"lr_warmup_steps": 1000, "lr_warmup_factor": 0.001, "lr_steps": [16, 22],
              "lr_gamma": 0.1}
    plan = TrainingPlan(steps_per_epoch=100, total_steps=2600, global_batch_size=16)
    factor = [detection.lr_factor(step, plan, config) for step in range(2600)]
    # min(1000, 100 - 1) warmup updates from 0.001, as torchvision's warmup_lr_scheduler.
    assert factor[0] == pytest.approx(0.001)
    assert factor[50] == pytest.approx(0.001 * (1 - 50 / 99) + 50 / 99)
    assert factor[99] == factor[1599] == 1.0
    assert factor[1600] == factor[2199] == pytest.approx(0.1)
    assert factor[2200] == factor[2599] == pytest.approx(0.01)


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_the_ground_truth_as_detections_scores_ap_1(coins):
    val = detection.CocoDetection(coins, "val", train=False, masks=True)
    ids, outputs = [], []
    for index in range(len(val)):
        image_id, image, target = val[index]
        ids.append(image_id)
        outputs.append({"boxes": target["boxes"], "labels": target["labels"],
                        "scores": torch.ones(len(target["labels"])),
                        "masks": target["masks"][:, None].float()})
    for iou_type in ("bbox", "segm"):
        results = detection.coco_results(ids, outputs, [iou_type])
        assert detection.coco_map(val.coco, results, iou_type) == pytest.approx(1.0)
    assert detection.coco_map(val.coco, [], "bbox") == 0.0


def test_collate_keeps_images_of_different_sizes_and_counts_the_batch(coins):
    train = detection.CocoDetection(coins, "train", train=True, masks=False, hflip=1.0,
                                    repeats=3)
    assert len(train) == 12
    items = [train[0], train[1]]
    ids, images, targets = detection.collate(items)
    assert ids.tolist() == [1, 2] and len(images) == 2
    # The flip moved the boxes with the image: x1 = width - x2 of the unflipped box.
    plain = detection.CocoDetection(coins, "train", train=True, masks=False)
    width = images[0].shape[-1]
    assert torch.equal(targets[0]["boxes"][:, 0], width - plain[0][2]["boxes"][:, 2])


def test_aspect_ratio_groups_bin_as_torchvisions_references():
    # k 3: edges 2 ** linspace(-1, 1, 7), i.e. 0.5, 0.63, 0.79, 1, 1.26, 1.59, 2.
    ratios = [640 / 480, 480 / 640, 1.0, 0.4, 2.5, 1.2]
    assert detection.aspect_ratio_groups(ratios, 3) == [5, 2, 4, 0, 7, 4]
    assert detection.aspect_ratio_groups(ratios, 0) == [1, 0, 1, 0, 1, 1]


def test_grouped_batches_hold_one_group_and_complete_the_fullest_buffers_last():
    """Indices 0..6 in order, groups 0 1 0 1 1 0 2, batches of 2: [0, 2] and [1, 3] as they
    fill, then one more (7 // 2 = 3): the fullest buffer, [5], completed with its group's first
    index; 4 and 6 are left for another epoch."""
    sampler = torch.utils.data.SequentialSampler(range(7))
    grouped = detection.GroupedBatchSampler(sampler, [0, 1, 0, 1, 1, 0, 2], 2)
    assert list(grouped) == [[0, 2], [1, 3], [5, 0]] and len(grouped) == 3


def test_the_detection_cases_batch_by_aspect_ratio_as_flagperf(coins):
    """The standard recipes group by aspect ratio (FlagPerf's aspect_ratio_group_factor 3); the
    coins' training images share one shape, so their batches are the sampler's order, as
    without grouping."""
    for model in ("faster_rcnn", "mask_rcnn", "retinanet"):
        assert case_config(model)["aspect_ratio_group_factor"] == 3, model
    config = {**case_config("faster_rcnn", "cpu"), "train_batch_size": 2}
    case = detection.detection_case(config, coins, lambda: None, metric="mAP",
                                    config_key="target_mAP")
    sampler = torch.utils.data.SequentialSampler(case.train_set)
    batches = list(case.batch_sampler(sampler, 2))
    assert batches == [[i, i + 1] for i in range(0, len(case.train_set) - 1, 2)]

# One real round of each cpu profile: tests/test_local_run.py (the catalog's one local run).
