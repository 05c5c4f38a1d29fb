"""the results database: runs, hosts, software, cases, results, rounds, figures, nodes, published figures

Revision ID: 0001
Revises:
Create Date: 2026-11-28
"""

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('cases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('suite', sa.String(length=20), nullable=False),
    sa.Column('model', sa.String(length=100), nullable=False),
    sa.Column('framework', sa.String(length=100), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cases')),
    sa.UniqueConstraint('suite', 'model', 'framework', name=op.f('uq_cases_suite_model_framework'))
    )
    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uid', sa.String(length=64), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('run_id', sa.String(length=255), nullable=False),
    sa.Column('created', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ingested', sa.DateTime(timezone=True), nullable=False),
    sa.Column('vendor', sa.String(length=100), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('summary_html', sa.Text(), nullable=True),
    sa.Column('git_commit', sa.String(length=64), nullable=True),
    sa.Column('git_dirty', sa.Boolean(), nullable=True),
    sa.Column('versions', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    sa.UniqueConstraint('uid', name=op.f('uq_runs_uid'))
    )
    op.create_table('hosts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('label', sa.String(length=50), nullable=False),
    sa.Column('cpu_model', sa.String(length=255), nullable=True),
    sa.Column('logical_cores', sa.Integer(), nullable=True),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=True),
    sa.Column('kernel', sa.String(length=255), nullable=True),
    sa.Column('chip', sa.String(length=255), nullable=True),
    sa.Column('devices', sa.Integer(), nullable=True),
    sa.Column('driver', sa.String(length=255), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_hosts_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hosts')),
    sa.UniqueConstraint('run_id', 'label', name=op.f('uq_hosts_run_id_label'))
    )
    with op.batch_alter_table('hosts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_hosts_run_id'), ['run_id'], unique=False)

    op.create_table('published',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('case_id', sa.Integer(), nullable=False),
    sa.Column('vendor', sa.String(length=100), nullable=False),
    sa.Column('hardware', sa.String(length=100), nullable=False),
    sa.Column('nnodes', sa.Integer(), nullable=False),
    sa.Column('nproc_per_node', sa.Integer(), nullable=False),
    sa.Column('precision', sa.String(length=50), nullable=False),
    sa.Column('label', sa.String(length=255), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('note', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['case_id'], ['cases.id'], name=op.f('fk_published_case_id_cases')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_published')),
    sa.UniqueConstraint('case_id', 'vendor', 'hardware', 'nnodes', 'nproc_per_node', name=op.f('uq_published_case_id_vendor_hardware_nnodes_nproc_per_node'))
    )
    with op.batch_alter_table('published', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_published_case_id'), ['case_id'], unique=False)

    op.create_table('results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('case_id', sa.Integer(), nullable=False),
    sa.Column('case_key', sa.String(length=255), nullable=False),
    sa.Column('hardware', sa.String(length=100), nullable=True),
    sa.Column('chip', sa.String(length=255), nullable=True),
    sa.Column('nnodes', sa.Integer(), nullable=True),
    sa.Column('nproc_per_node', sa.Integer(), nullable=True),
    sa.Column('profile', sa.String(length=100), nullable=True),
    sa.Column('profile_label', sa.Text(), nullable=True),
    sa.Column('precision', sa.String(length=50), nullable=True),
    sa.Column('software', sa.String(length=255), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('rounds_planned', sa.Integer(), nullable=False),
    sa.Column('rounds_passed', sa.Integer(), nullable=False),
    sa.Column('figure', sa.String(length=100), nullable=True),
    sa.Column('unit', sa.String(length=50), nullable=True),
    sa.Column('metric', sa.String(length=100), nullable=True),
    sa.Column('comparison', sa.String(length=2), nullable=True),
    sa.Column('target', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['case_id'], ['cases.id'], name=op.f('fk_results_case_id_cases')),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_results_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_results')),
    sa.UniqueConstraint('run_id', 'case_key', name=op.f('uq_results_run_id_case_key'))
    )
    with op.batch_alter_table('results', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_results_case_id'), ['case_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_results_run_id'), ['run_id'], unique=False)

    op.create_table('published_figures',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('published_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('unit', sa.String(length=50), nullable=False),
    sa.ForeignKeyConstraint(['published_id'], ['published.id'], name=op.f('fk_published_figures_published_id_published'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_published_figures')),
    sa.UniqueConstraint('published_id', 'name', name=op.f('uq_published_figures_published_id_name'))
    )
    with op.batch_alter_table('published_figures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_published_figures_published_id'), ['published_id'], unique=False)

    op.create_table('rounds',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('result_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('started_ms', sa.BigInteger(), nullable=True),
    sa.Column('ended_ms', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['result_id'], ['results.id'], name=op.f('fk_rounds_result_id_results'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rounds')),
    sa.UniqueConstraint('result_id', 'number', name=op.f('uq_rounds_result_id_number'))
    )
    with op.batch_alter_table('rounds', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rounds_result_id'), ['result_id'], unique=False)

    op.create_table('software',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('host_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('version', sa.String(length=100), nullable=False),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_software_host_id_hosts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_software')),
    sa.UniqueConstraint('host_id', 'name', name=op.f('uq_software_host_id_name'))
    )
    with op.batch_alter_table('software', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_software_host_id'), ['host_id'], unique=False)

    op.create_table('figures',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('round_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('unit', sa.String(length=50), nullable=False),
    sa.Column('direction', sa.SmallInteger(), nullable=False),
    sa.ForeignKeyConstraint(['round_id'], ['rounds.id'], name=op.f('fk_figures_round_id_rounds'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_figures')),
    sa.UniqueConstraint('round_id', 'name', name=op.f('uq_figures_round_id_name'))
    )
    with op.batch_alter_table('figures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_figures_round_id'), ['round_id'], unique=False)

    op.create_table('nodes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('round_id', sa.Integer(), nullable=False),
    sa.Column('host_id', sa.Integer(), nullable=True),
    sa.Column('noderank', sa.Integer(), nullable=False),
    sa.Column('rc', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_nodes_host_id_hosts'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['round_id'], ['rounds.id'], name=op.f('fk_nodes_round_id_rounds'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_nodes')),
    sa.UniqueConstraint('round_id', 'noderank', name=op.f('uq_nodes_round_id_noderank'))
    )
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_nodes_host_id'), ['host_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_nodes_round_id'), ['round_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_nodes_round_id'))
        batch_op.drop_index(batch_op.f('ix_nodes_host_id'))

    op.drop_table('nodes')
    with op.batch_alter_table('figures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_figures_round_id'))

    op.drop_table('figures')
    with op.batch_alter_table('software', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_software_host_id'))

    op.drop_table('software')
    with op.batch_alter_table('rounds', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rounds_result_id'))

    op.drop_table('rounds')
    with op.batch_alter_table('published_figures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_published_figures_published_id'))

    op.drop_table('published_figures')
    with op.batch_alter_table('results', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_results_run_id'))
        batch_op.drop_index(batch_op.f('ix_results_case_id'))

    op.drop_table('results')
    with op.batch_alter_table('published', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_published_case_id'))

    op.drop_table('published')
    with op.batch_alter_table('hosts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_hosts_run_id'))

    op.drop_table('hosts')
    op.drop_table('runs')
    op.drop_table('cases')
